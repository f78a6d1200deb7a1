package fleetapi

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
)

// Defaults of the admission of heavy reads (Options.HeavySlots,
// HeavyQueue, HeavyWait).
const (
	// DefaultHeavyQueue is how many heavy reads may wait for a slot at
	// once; past it, one is refused at once.
	DefaultHeavyQueue = 64
	// DefaultHeavyWait is how long a heavy read waits for a slot before
	// it is refused.
	DefaultHeavyWait = 2 * time.Second
)

// DefaultHeavySlots is how many heavy reads an instance works on at once
// when Options.HeavySlots is 0: one fewer than the processors Go runs on
// (GOMAXPROCS), and at least one, so that a processor is always free for
// the reads that cost almost nothing (a fleet or a cluster by name).
func DefaultHeavySlots() int { return max(1, runtime.GOMAXPROCS(0)-1) }

// admission holds heavy reads to a few at a time, first come first
// served.
type admission struct {
	slots   int
	sem     *semaphore.Weighted
	queue   int64
	waiting atomic.Int64
	wait    time.Duration
}

func newAdmission(o Options) *admission {
	slots := o.HeavySlots
	if slots <= 0 {
		slots = DefaultHeavySlots()
	}
	a := &admission{slots: slots, sem: semaphore.NewWeighted(int64(slots)), queue: int64(o.HeavyQueue), wait: o.HeavyWait}
	if a.queue <= 0 {
		a.queue = DefaultHeavyQueue
	}
	if a.wait <= 0 {
		a.wait = DefaultHeavyWait
	}
	return a
}

// Admit waits for a slot to do a heavy read in: one whose cost grows
// with the view or with what the caller asks for (a list, a placement,
// a label's values, the metrics; a fleet or a cluster by name is not
// heavy). It returns the function that frees the slot, to be called once
// the answer is encoded (before it is written to a client, which may read
// slowly). A read that finds Options.HeavyQueue others waiting, or waits
// Options.HeavyWait, is refused with ResourceExhausted (retry: another
// instance may take it); one whose context ends gets its error.
//
// However many readers ask for expensive answers, they take at most
// HeavySlots processors between them: a reader who sends the largest
// legal query in a loop delays the other heavy readers, whose turn it
// takes, and not those who read a fleet by name.
func (s *Service) Admit(ctx context.Context) (release func(), err error) { return s.admit.acquire(ctx) }

func (a *admission) acquire(ctx context.Context) (release func(), err error) {
	if a.sem.TryAcquire(1) {
		return a.release, nil
	}
	if a.waiting.Add(1) > a.queue {
		a.waiting.Add(-1)
		return nil, a.busy()
	}
	defer a.waiting.Add(-1)
	wctx, cancel := context.WithTimeout(ctx, a.wait)
	defer cancel()
	if err := a.sem.Acquire(wctx, 1); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, a.busy()
		}
		return nil, err
	}
	return a.release, nil
}

func (a *admission) release() { a.sem.Release(1) }

func (a *admission) busy() error {
	return &Error{Code: ResourceExhausted, Message: fmt.Sprintf(
		"this instance is busy with other lists, placements and metrics (%d at a time, %d waiting); retry shortly, another instance may take it",
		a.slots, a.queue)}
}
