package fleet

import "errors"

// ErrInvalid marks input that can never become valid by retrying: a
// malformed event, an invalid key, an oversize label. Callers acknowledge
// such messages after logging them instead of asking for redelivery.
var ErrInvalid = errors.New("invalid")
