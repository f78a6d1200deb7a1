package fleet

import (
	"fmt"
	"time"
)

// DefaultMaxClockSkew is how far ahead of the ingest side's clock a
// publisher's clock may run before its events are refused.
const DefaultMaxClockSkew = 10 * time.Minute

// CheckTimes reports, wrapped in ErrInvalid, an event whose version or
// time no honest publisher can have produced by now: a term (a time in
// milliseconds, see the publisher's terms) above now + maxSkew, or an
// observedAt outside [now − retention, now + maxSkew]. Such an event would
// fence off every real one that follows (a term from the future), keep a
// dead cluster looking alive (a heartbeat from the future), or bring back
// a fleet whose tombstone has already expired (an event older than the
// tombstones).
func CheckTimes(e Event, now time.Time, retention, maxSkew time.Duration) error {
	if limit := now.Add(maxSkew).UnixMilli(); e.Version.Term > limit {
		return fmt.Errorf("%w: version.term %d: more than %s ahead of the ingest clock (%d ms)", ErrInvalid, e.Version.Term, maxSkew, now.UnixMilli())
	}
	observed := e.ObservedAt.Time()
	if observed.After(now.Add(maxSkew)) {
		return fmt.Errorf("%w: observedAt %s: more than %s ahead of the ingest clock (%s)", ErrInvalid, observed.Format(time.RFC3339Nano), maxSkew, now.UTC().Format(time.RFC3339Nano))
	}
	if observed.Before(now.Add(-retention)) {
		return fmt.Errorf("%w: observedAt %s: older than the tombstone retention %s", ErrInvalid, observed.Format(time.RFC3339Nano), retention)
	}
	return nil
}
