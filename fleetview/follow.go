package fleetview

import (
	"context"
	"errors"
	"time"

	"github.com/fleetcast/fleetcast/logging"
)

// Watching counts a watch, and keeps the view current while any runs: it
// follows its Source's listener when the Source is a Follower, and polls
// every WatchPoll otherwise; stop uncounts it. Past MaxWatches it returns
// ErrTooManyWatches.
func (e *Engine) Watching() (stop func(), err error) {
	e.schedMu.Lock()
	defer e.schedMu.Unlock()
	if e.watches >= e.opts.MaxWatches {
		return nil, ErrTooManyWatches
	}
	if e.watches++; e.watches == 1 {
		e.pollStop = make(chan struct{})
		if f, ok := e.src.(Follower); ok {
			go e.follow(f, e.pollStop)
		} else {
			go e.poll(e.pollStop)
		}
	}
	return func() {
		e.schedMu.Lock()
		defer e.schedMu.Unlock()
		if e.watches--; e.watches == 0 {
			close(e.pollStop)
		}
	}, nil
}

// Watches counts the watches running.
func (e *Engine) Watches() int {
	e.schedMu.Lock()
	defer e.schedMu.Unlock()
	return e.watches
}

// poll runs a round every WatchPoll until stop is closed, one at a time: a
// slow store slows the polling, and never piles rounds up.
func (e *Engine) poll(stop <-chan struct{}) {
	t := time.NewTicker(e.opts.WatchPoll)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		if !e.waitRound(stop) {
			return
		}
	}
}

// waitRound runs a round unless one runs, and waits for it (a failure is
// logged by run); false when stop was closed first.
func (e *Engine) waitRound(stop <-chan struct{}) bool {
	r, _ := e.kick()
	select {
	case <-stop:
		return false
	case <-r.done:
		return true
	}
}

// FollowRetry is how long a view polls after its listener failed before
// it starts another.
const FollowRetry = 5 * time.Second

// follow keeps the view current from a listener on its Follower until
// stop is closed: the listener delivers each write once as it commits.
// The view still reads the clusters every ClusterRefresh (at least every
// WatchPoll), and the fleets then too if the listener has been quiet for
// MaxStaleness/2 (see syncOnce). When the listener fails, the view polls
// every WatchPoll, and starts another listener FollowRetry later, from
// the point its rounds have reached.
func (e *Engine) follow(f Follower, stop <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	var ended chan error // the running listener's end; nil while none runs
	defer func() {
		cancel()
		if ended != nil {
			<-ended
		}
		e.setListening(false)
	}()
	var retry time.Time
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case err := <-ended:
			ended = nil
			e.setListening(false)
			if err == nil {
				err = errors.New("the listener ended")
			}
			e.opts.Log.Warn("query view listener failed: polling until it restarts",
				"retryInSeconds", FollowRetry.Seconds(), logging.KeyError, err.Error())
			retry = e.opts.Now().Add(FollowRetry)
			t.Reset(e.opts.WatchPoll)
			continue
		case <-t.C:
		}
		if !e.waitRound(stop) {
			return
		}
		if ended == nil && !e.opts.Now().Before(retry) {
			e.mu.Lock()
			loaded, since := e.st.loaded, e.st.fleetsSince
			e.mu.Unlock()
			if loaded {
				ch := make(chan error, 1)
				go func() { ch <- f.FollowFleets(ctx, since, e.heard) }()
				ended = ch
			}
		}
		next := e.opts.WatchPoll
		if ended != nil {
			next = max(next, e.opts.clusterRefresh())
		}
		t.Reset(next)
	}
}
