package fleet

import "errors"

// ErrInvalid marks input that can never become valid by retrying: a
// malformed event, an invalid key, an oversize label. Callers acknowledge
// such messages after logging them instead of asking for redelivery.
var ErrInvalid = errors.New("invalid")

// ErrPermanent marks a failure of the store that retrying the same event
// cannot fix: a request the database refuses (invalid argument, failed
// precondition) or a stored document that cannot be read. The document is
// left as it is; callers acknowledge the message after logging it, so that
// one bad document does not hold up the cluster's other events.
var ErrPermanent = errors.New("permanent store error")

// ErrStoreNotReady marks a failure of the store that only its operator
// can end, and that ends without any change to the event: Firestore
// refusing a query for want of an index that is missing or still
// building. Callers have the message redelivered, as for any transient
// error, and say the operator must act.
var ErrStoreNotReady = errors.New("the store is not ready for this query")
