package fleetapi

import (
	"context"
	"fmt"
	"maps"
	"net/url"
	"time"

	"github.com/fleetcast/fleetcast/fleetview"
)

// EventKind says what a watch event is.
type EventKind string

// Kinds of watch event.
const (
	// A fleet entered the watched set: it was created, started to match
	// the filter, or its cluster turned fresh.
	Added EventKind = "added"
	// A fleet in the set changed; with includeStale, also when its
	// cluster turned stale or fresh.
	Modified EventKind = "modified"
	// A fleet left the set: it was deleted, stopped matching, or its
	// cluster turned stale. Fleet is its last state.
	Removed EventKind = "removed"
	// A cluster appeared, turned stale or fresh, or sent a heartbeat
	// that changed what the API shows of it (its heartbeat time, fleet
	// count, totals, labels), of the watched clusters only when the
	// filter names some. Its fleets' events follow it.
	ClusterChanged EventKind = "cluster"
	// Synced ends the initial set, or the changes missed before a
	// resume: the client now holds the whole set.
	Synced EventKind = "synced"
	// Restart: the watch starts over. Forget every fleet held; the
	// whole set follows, then Synced. Sent when a resume token cannot be used (another
	// instance's, or older than the changes the instance keeps), or
	// when the client fell more than 16 384 changes behind.
	Restart EventKind = "restart"
	// Heartbeat is sent every Options.Heartbeat: a client that hears
	// nothing for longer knows the stream is dead.
	Heartbeat EventKind = "heartbeat"
)

// Event is one message of a watch.
type Event struct {
	Kind EventKind
	// Fleet: of Added, Modified and Removed.
	Fleet Fleet
	// Cluster: of ClusterChanged.
	Cluster Cluster
	// FleetCount: of Synced, the fleets in the set.
	FleetCount int
	// Time: of Heartbeat.
	Time time.Time
	// ResumeToken resumes the watch after this event.
	ResumeToken string
}

// watchOnly are the parameters of GET /v1/fleets that a watch does not
// take: it has no pages, and no order but the events'.
var watchOnly = map[string]string{
	"orderBy": "a watch has no order", "pageSize": "a watch has no pages", "pageToken": "a watch has no pages",
}

// ParseWatch reads the parameters of GET /v1/watch: the filters of
// /v1/fleets and resumeToken.
func ParseWatch(v url.Values) (Query, string, error) {
	v = maps.Clone(v)
	token, err := single(v, "resumeToken")
	if err != nil {
		return Query{}, "", err
	}
	delete(v, "resumeToken")
	for name, why := range watchOnly {
		if _, ok := v[name]; ok {
			return Query{}, "", paramErr(name, "%s", why)
		}
	}
	q, err := ParseQuery(v)
	return q, token, err
}

// watchFilter is q as a watch uses it, and its fingerprint.
func watchFilter(q Query) (Query, string) {
	q = q.normalized()
	q.OrderBy, q.PageSize, q.After = OrderByName, DefaultPageSize, nil
	return q, q.fingerprint()
}

// Watch sends the live fleets matching q, then every change to that set,
// until ctx ends or send fails: send's error is returned, and nil when
// ctx ends. With the resumeToken of an event it had, a client receives
// exactly the events that followed it, then Synced; with a token this
// instance cannot use, Restart and the whole set. Errors before the first
// event are *Error: a bad token or filter (InvalidArgument), too many
// streams (ResourceExhausted), or a store that cannot be read
// (Unavailable, Internal).
//
// Every watch of a Service follows the one view (fleetview.Watcher),
// whatever the number of watches: while any runs, the view follows its
// Source's listener (a Follower, such as firestoredb.Store), which
// delivers each write once, or else syncs every Options.WatchPoll. A watch
// holds only its place in the view's bounded feed of changes and the
// events of the step it is sending, a step coalescing every change since
// its previous one to the newest state of each fleet: a client that reads
// slowly gets fewer, newer events, and delays no other watch.
func (s *Service) Watch(ctx context.Context, q Query, resumeToken string, send func(Event) error) error {
	return s.WatchSteps(ctx, q, resumeToken, func(events []Event) error {
		for _, e := range events {
			if err := send(e); err != nil {
				return err
			}
		}
		return nil
	})
}

// WatchSteps is Watch, its events handed over a step at a time (at most
// StepEvents, with their resume tokens): a stream that writes them all
// before it flushes sends a large initial set in a few writes rather than
// one per fleet. The slice is valid only during the call.
func (s *Service) WatchSteps(ctx context.Context, q Query, resumeToken string, send func([]Event) error) error {
	q, filter := watchFilter(q)
	w, err := s.eng.Watch(q, filter, resumeToken)
	if err != nil {
		return paramErr("resumeToken", "%v", err)
	}
	stop, err := s.eng.Watching()
	if err != nil {
		return &Error{Code: ResourceExhausted, Message: fmt.Sprintf(
			"this instance serves its most streams (%d); retry shortly, another instance may take it", s.eng.Options().MaxWatches)}
	}
	defer stop()
	if err := s.holds(q.Clusters...); err != nil {
		return err
	}
	if err := s.Read(ctx, func(r *Read) error { return r.knownKeys(q) }); err != nil {
		return err
	}
	if resumeToken == "" {
		// A new watch's set is the view's after the read above (the
		// first load, on a new instance): a watch without a token
		// cannot fail.
		w, _ = s.eng.Watch(q, filter, "")
	}
	heartbeat := time.NewTicker(s.opts.Heartbeat)
	defer heartbeat.Stop()
	var events []Event
	for {
		st := w.Step()
		events = events[:0]
		for _, e := range st.Events {
			events = append(events, s.event(e))
		}
		if len(events) > 0 {
			if err := send(events); err != nil {
				return err
			}
		}
		if st.More {
			// The rest of the step, at once: a chunk at a time, so
			// that a watch holds no more than one, however large
			// its set.
			if ctx.Err() != nil {
				return nil
			}
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-st.Updated:
		case <-heartbeat.C:
			if err := send([]Event{{Kind: Heartbeat, Time: s.opts.Now(), ResumeToken: w.Token()}}); err != nil {
				return err
			}
		}
	}
}

// kinds word the engine's event kinds.
var eventKinds = map[fleetview.Kind]EventKind{
	fleetview.Added: Added, fleetview.Modified: Modified, fleetview.Removed: Removed,
	fleetview.ClusterChanged: ClusterChanged, fleetview.Synced: Synced, fleetview.Restart: Restart,
}

// event shapes an engine's event.
func (s *Service) event(p fleetview.Event) Event {
	e := Event{Kind: eventKinds[p.Kind], ResumeToken: p.Token}
	switch p.Kind {
	case fleetview.Added, fleetview.Modified, fleetview.Removed:
		e.Fleet = NewFleet(p.Doc, p.Stale)
	case fleetview.ClusterChanged:
		if p.Cluster != nil {
			e.Cluster = NewCluster(p.Cluster, p.Stale)
		} else {
			e.Cluster = Cluster{Cluster: p.Name, Labels: map[string]string{}, Stale: true}
		}
	case fleetview.Synced:
		e.FleetCount = p.Count
	}
	return e
}
