package fleetapi

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAdmitBoundsTheWaitingAndTheWait: with every slot taken, heavy
// reads wait in turn, at most HeavyQueue of them: one more is refused at
// once, a waiter past HeavyWait is refused, a waiter whose context ends
// gets its error, and the first waiter takes the slot when it is freed.
func TestAdmitBoundsTheWaitingAndTheWait(t *testing.T) {
	svc := newWorld(t).service(Options{HeavySlots: 1, HeavyQueue: 1, HeavyWait: time.Hour})
	release, err := svc.Admit(t.Context())
	require.NoError(t, err)

	admitted := make(chan func())
	go func() {
		r, err := svc.Admit(t.Context())
		assert.NoError(t, err)
		admitted <- r
	}()
	require.Eventually(t, func() bool { return svc.admit.waiting.Load() == 1 }, 10*time.Second, time.Millisecond)

	_, err = svc.Admit(t.Context())
	assert.Equal(t, ResourceExhausted, CodeOf(err), "a read past the queue is refused at once: %v", err)

	release()
	select {
	case r := <-admitted:
		r()
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not take the freed slot")
	}

	release, err = svc.Admit(t.Context())
	require.NoError(t, err)
	defer release()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = svc.Admit(ctx)
	assert.True(t, errors.Is(err, context.Canceled), "a waiter whose context ends gets its error: %v", err)

	short := newWorld(t).service(Options{HeavySlots: 1, HeavyWait: 20 * time.Millisecond})
	held, err := short.Admit(t.Context())
	require.NoError(t, err)
	defer held()
	_, err = short.Admit(t.Context())
	assert.Equal(t, ResourceExhausted, CodeOf(err), "a waiter past HeavyWait is refused: %v", err)
	assert.Zero(t, short.admit.waiting.Load(), "a refused waiter leaves the queue")
}
