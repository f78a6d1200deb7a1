package fleetapi

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetview"
	"github.com/fleetcast/fleetcast/internal/testenv/fleetapitest"
)

// listened is a Service over a Listening store with one watch running,
// whose events arrive on the channel.
type listened struct {
	*world
	svc    *Service
	events chan Event
}

// listen starts a watch on a Service over src (w's store, listening) and
// waits for its initial set and its listener. The clock stands still, so
// the listener never falls quiet; the follow loop ticks once.
func listen(t *testing.T, w *world, src Source, opts Options) *listened {
	t.Helper()
	opts.Now = w.Clock.Now
	opts.ClusterRefresh, opts.StaleAfter = 100*time.Hour, 100*time.Hour
	if opts.MaxStaleness == 0 {
		opts.MaxStaleness = time.Hour
	}
	if opts.WatchPoll == 0 {
		opts.WatchPoll = time.Millisecond
	}
	l := &listened{world: w, svc: NewService(src, opts), events: make(chan Event, 1000)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = l.svc.Watch(ctx, NewQuery(), "", func(e Event) error { l.events <- e; return nil })
	}()
	t.Cleanup(func() { cancel(); <-done })
	l.next(t, Synced)
	require.Eventually(t, func() bool { return w.Mem.Listeners() == 1 }, 10*time.Second, time.Millisecond, "no listener started")
	return l
}

// next returns the watch's next event of kind, skipping others.
func (l *listened) next(t *testing.T, kind EventKind) Event {
	t.Helper()
	for {
		select {
		case e := <-l.events:
			if e.Kind == kind {
				return e
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no %s event", kind)
		}
	}
}

// TestAListenedViewReadsEachWriteOnce: while watches run on a Follower's
// view, each write is read once, by the listener, and reaches the watches
// and the answers without a sync: a poll would have read it again at
// every sync within CommitLag.
func TestAListenedViewReadsEachWriteOnce(t *testing.T) {
	w := newWorld(t)
	w.Put(doc("pc", "games", "a", nil, 0, nil))
	l := listen(t, w, fleetapitest.Listening{Memory: w.Mem}, Options{})
	reads := w.Mem.Reads()
	for i := range int64(50) {
		name := []string{"a", "b"}[i%2]
		w.Put(doc("pc", "games", name, nil, i+1, nil))
		e := l.next(t, map[bool]EventKind{true: Added, false: Modified}[i == 1])
		assert.Equal(t, i+1, e.Fleet.ReadyReplicas)
		f, err := l.svc.GetFleet(t.Context(), fleet.Key{Cluster: "pc", Namespace: "games", Name: name})
		require.NoError(t, err)
		assert.Equal(t, i+1, f.ReadyReplicas, "the answer holds what the listener delivered")
	}
	assert.Equal(t, int64(50), w.Mem.Reads()-reads, "one read per write, none per answer")

	// A caller that must see every write acknowledged before it still
	// gets a sync that reads: a listener's delivery proves nothing about
	// a write it has yet to deliver.
	reads = w.Mem.Reads()
	require.NoError(t, l.svc.Sync(t.Context()))
	assert.Equal(t, int64(2), w.Mem.Reads()-reads, "a strict sync reads (both fleets, written within CommitLag of its point)")
}

// TestAQuietListenerIsPolled: a listener sends nothing while nothing
// changes, so a view whose listener has been quiet for half of
// MaxStaleness reads the fleets again, in the background of a request.
func TestAQuietListenerIsPolled(t *testing.T) {
	w := newWorld(t)
	l := listen(t, w, fleetapitest.Listening{Memory: w.Mem}, Options{MaxStaleness: time.Second})
	reads := w.Mem.Reads()
	w.Clock.Step(400 * time.Millisecond)
	all(t, l.svc, NewQuery())
	assert.Equal(t, reads, w.Mem.Reads(), "the listener is not quiet for long enough yet")
	w.Clock.Step(200 * time.Millisecond)
	all(t, l.svc, NewQuery())
	require.Eventually(t, func() bool { return w.Mem.Reads() == reads+1 }, 10*time.Second, time.Millisecond,
		"a request past half of MaxStaleness polls the quiet listener's fleets")
}

// TestAViewPollsWhileItsListenerIsDown: when the listener fails, the view
// polls every WatchPoll, so writes still reach the watches, and it starts
// another listener fleetview.FollowRetry later, from where its syncs got.
func TestAViewPollsWhileItsListenerIsDown(t *testing.T) {
	w := newWorld(t)
	l := listen(t, w, fleetapitest.Listening{Memory: w.Mem}, Options{})
	w.Mem.BreakListeners(errors.New("stream reset"))
	require.Eventually(t, func() bool { return w.Mem.Listeners() == 0 }, 10*time.Second, time.Millisecond)
	w.Put(doc("pc", "games", "a", nil, 1, nil))
	assert.Equal(t, "a", l.next(t, Added).Fleet.Name, "the polls deliver")
	require.Never(t, func() bool { return w.Mem.Listeners() > 0 }, 50*time.Millisecond, time.Millisecond,
		"a listener started again before fleetview.FollowRetry")

	w.Clock.Step(fleetview.FollowRetry)
	require.Eventually(t, func() bool { return w.Mem.Listeners() == 1 }, 10*time.Second, time.Millisecond)
	reads := w.Mem.Reads()
	w.Put(doc("pc", "games", "a", nil, 2, nil))
	assert.Equal(t, int64(2), l.next(t, Modified).Fleet.ReadyReplicas)
	assert.Equal(t, int64(1), w.Mem.Reads()-reads, "the new listener delivers, and nothing polls")
}

// racing is a Listening store whose next read runs during after it took
// its documents and before it returns them: the listener delivers what
// was written meanwhile before the sync applies its older read.
type racing struct {
	fleetapitest.Listening
	mu     sync.Mutex
	during func()
}

func (r *racing) hook() {
	r.mu.Lock()
	f := r.during
	r.during = nil
	r.mu.Unlock()
	if f != nil {
		f()
	}
}

func (r *racing) FleetsWrittenSince(ctx context.Context, since time.Time) (fleet.Page[fleet.Document], error) {
	p, err := r.Listening.FleetsWrittenSince(ctx, since)
	r.hook()
	return p, err
}

func (r *racing) LiveFleets(ctx context.Context, each func(*fleet.Document)) ([]string, error) {
	bad, err := r.Listening.LiveFleets(ctx, each)
	r.hook()
	return bad, err
}

// TestASyncNeverStepsBackOverTheListener: a sync whose read predates what
// the listener delivered while it read (a fleet's deletion, a newer
// state) leaves the listener's state in the view: a deleted fleet does
// not come back, a watch sees no step back. Both for a sync of what was
// written since the last one and for a full load.
func TestASyncNeverStepsBackOverTheListener(t *testing.T) {
	for _, full := range []bool{false, true} {
		t.Run(map[bool]string{false: "delta", true: "load"}[full], func(t *testing.T) {
			w := newWorld(t)
			src := &racing{Listening: fleetapitest.Listening{Memory: w.Mem}}
			w.Put(doc("pc", "games", "a", nil, 1, nil))
			w.Put(doc("pc", "games", "b", nil, 1, nil))
			l := listen(t, w, src, Options{Resync: time.Hour})
			if full {
				w.Clock.Step(time.Hour) // the next sync loads everything
			}
			src.mu.Lock()
			src.during = func() {
				w.Remove("pc", "games", "a")
				w.Put(doc("pc", "games", "b", nil, 2, nil))
				assert.Equal(t, "a", l.next(t, Removed).Fleet.Name)
				assert.Equal(t, int64(2), l.next(t, Modified).Fleet.ReadyReplicas)
			}
			src.mu.Unlock()
			require.NoError(t, l.svc.Sync(t.Context()))
			src.mu.Lock()
			assert.Nil(t, src.during, "the sync read")
			src.mu.Unlock()

			assert.Equal(t, []string{"pc/games/b"}, all(t, l.svc, NewQuery()))
			f, err := l.svc.GetFleet(t.Context(), fleet.Key{Cluster: "pc", Namespace: "games", Name: "b"})
			require.NoError(t, err)
			assert.Equal(t, int64(2), f.ReadyReplicas)
			select {
			case e := <-l.events:
				if e.Kind != Heartbeat {
					t.Fatalf("the watch got %s %s after the sync", e.Kind, e.Fleet.Name)
				}
			case <-time.After(50 * time.Millisecond):
			}
		})
	}
}
