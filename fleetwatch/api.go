package fleetwatch

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/fleetapi/fleetpb"
	"github.com/fleetcast/fleetcast/fleetclient"
	fleetcastv1 "github.com/fleetcast/fleetcast/gen/fleetcast/v1"
	"github.com/fleetcast/fleetcast/gen/fleetcast/v1/fleetcastv1connect"
)

// WatchAPI is Watch fed by the query API's stream
// (InformationService.WatchFleets) instead of Firestore: a matchmaker
// outside Google Cloud needs only an ID token (fleetclient.NewHTTPClient), and
// every client of an instance shares its one read of each change. The
// stream includes the fleets of stale clusters, marked, as Watch does; a
// cluster is stale as the stream last said, and every cluster is stale
// once nothing (not even a heartbeat) has come for StaleAfter. A broken
// stream is resumed with jittered backoff from the last event handled.
// Like Watch, it fails fast when the server refuses the watch
// (InvalidArgument, Unauthenticated, PermissionDenied, NotFound,
// Unimplemented), and after Options.StartTimeout without an initial view.
func WatchAPI(ctx context.Context, client fleetcastv1connect.InformationServiceClient, q Options) (*View, error) {
	v, q, err := newView(q)
	if err != nil {
		return nil, err
	}
	f := &follower{v: v, client: client, clusters: map[string]bool{}, labels: map[string]map[string]string{},
		ready: make(chan struct{}), failed: make(chan error, 1)}
	v.clusters = f
	lctx, cancel := context.WithCancelCause(ctx)
	v.end = cancel
	var wg sync.WaitGroup
	wg.Go(func() { f.follow(lctx) })
	wg.Go(func() { v.judging(lctx) })
	go func() {
		wg.Wait()
		v.mu.Lock()
		v.err = context.Cause(lctx)
		v.mu.Unlock()
		close(v.done)
	}()
	if err := v.await(ctx, f.failed, f.ready); err != nil {
		cancel(err)
		return nil, err
	}
	return v, nil
}

// Names, Stale and Labels are what the stream last said of the clusters
// (a clusterSource): a cluster is stale as the stream said, when it never
// said, and once the stream has been silent for StaleAfter.
func (f *follower) Names() []string { return slices.Collect(maps.Keys(f.clusters)) }

func (f *follower) Stale(cluster string, now time.Time) bool {
	stale, known := f.clusters[cluster]
	return stale || !known || now.Sub(f.heard) > f.v.q.StaleAfter
}

func (f *follower) Labels(cluster string) map[string]string { return f.labels[cluster] }

// follower reads the stream into a View.
type follower struct {
	v      *View
	client fleetcastv1connect.InformationServiceClient
	// clusters: stale by name, as the stream said; heard: when it last
	// said anything. The View's lock guards both.
	clusters map[string]bool
	labels   map[string]map[string]string // by cluster
	heard    time.Time
	token    string // of the last event handled
	// next collects the whole set after a Restart, or at the start,
	// until Synced; nil while changes apply to the view.
	next   map[string]fleetapi.Fleet
	ready  chan struct{} // closed at the first Synced
	failed chan error    // why the watch cannot start, once
	synced bool
	// failing: the stream broke, and no event has come since.
	failing bool
}

func (f *follower) follow(ctx context.Context) {
	b := retryBackoff()
	for ctx.Err() == nil {
		delivered, err := f.stream(ctx)
		if ctx.Err() != nil {
			return
		}
		code := connect.CodeOf(err)
		if !f.synced && (code == connect.CodeInvalidArgument || code == connect.CodeUnauthenticated ||
			code == connect.CodePermissionDenied || code == connect.CodeUnimplemented || code == connect.CodeNotFound) {
			f.failed <- fleetclient.ErrorOf(err)
			return
		}
		if code == connect.CodeInvalidArgument && f.token != "" {
			f.token = "" // a token the server cannot take: start over
		}
		if delivered {
			// The stream worked, and ended (the server's timeout, a
			// break): resume soon. A refused connection delivered
			// nothing, and waits ever longer.
			b = retryBackoff()
		}
		wait := b.Step()
		if err == nil {
			err = errServerEnded
		}
		f.failing = true
		f.v.retried("stream", err, wait)
		if !sleep(ctx, wait) {
			return
		}
	}
}

// errServerEnded: the server ended the stream without an error.
var errServerEnded = errors.New("the server ended the stream")

// stream reads one stream until it ends, and says whether it delivered
// any event.
func (f *follower) stream(ctx context.Context) (delivered bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := f.client.WatchFleets(ctx, connect.NewRequest(&fleetcastv1.WatchFleetsRequest{
		Filter: &fleetcastv1.FleetFilter{Clusters: f.v.q.Clusters, IncludeStale: true}, ResumeToken: f.token}))
	if err != nil {
		return false, err
	}
	defer st.Close()
	if f.token == "" {
		f.next = map[string]fleetapi.Fleet{} // the whole set comes, without a Restart
	}
	for ; st.Receive(); delivered = true {
		if !delivered && f.failing {
			f.failing = false
			f.v.recovered("stream")
		}
		e, ok := fleetpb.FromEvent(st.Msg())
		f.v.mu.Lock()
		f.heard = f.v.q.Now()
		f.v.mu.Unlock()
		if !ok {
			continue // a newer server's event
		}
		f.apply(e)
		f.token = e.ResumeToken
	}
	return delivered, st.Err() // nil: the server ended the stream
}

func (f *follower) apply(e fleetapi.Event) {
	id := fleet.Key{Cluster: e.Fleet.Cluster, Namespace: e.Fleet.Namespace, Name: e.Fleet.Name}.DocID()
	e.Fleet.Stale = false // judged when read
	switch e.Kind {
	case fleetapi.Restart:
		f.next = map[string]fleetapi.Fleet{}
	case fleetapi.Added, fleetapi.Modified:
		if f.next != nil {
			f.next[id] = e.Fleet
			return
		}
		f.v.put(id, e.Fleet)
	case fleetapi.Removed:
		if f.next != nil {
			delete(f.next, id)
			return
		}
		f.v.mu.Lock()
		old, ok := f.v.fleets[id]
		delete(f.v.fleets, id)
		f.v.mu.Unlock()
		if ok {
			f.v.emit(Removed, old)
		}
	case fleetapi.ClusterChanged:
		f.v.mu.Lock()
		f.clusters[e.Cluster.Cluster] = e.Cluster.Stale
		f.labels[e.Cluster.Cluster] = e.Cluster.Labels
		f.v.mu.Unlock()
		f.v.judge()
	case fleetapi.Synced:
		if f.next != nil {
			f.v.replace(f.next, f.synced)
			f.next = nil
		}
		if !f.synced {
			f.synced = true
			close(f.ready)
		}
	}
}
