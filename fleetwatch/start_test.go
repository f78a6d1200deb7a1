package fleetwatch_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fleetcast/fleetcast/fleetwatch"
	"github.com/fleetcast/fleetcast/gen/fleetcast/v1/fleetcastv1connect"
	"github.com/fleetcast/fleetcast/internal/testenv/testhttp"
)

// unreachable returns a Firestore client of an address where nothing
// listens.
func unreachable(t *testing.T) *firestore.Client {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	client, err := firestore.NewClient(t.Context(), "nowhere", option.WithGRPCConn(conn))
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// TestWatchGivesUpAfterTheStartTimeout: with Firestore unreachable, Watch
// returns ErrStartTimeout within the timeout and a probe's worth, saying
// why (Firestore's listeners retry unavailability silently, so a probe
// asks), instead of hanging.
func TestWatchGivesUpAfterTheStartTimeout(t *testing.T) {
	start := time.Now()
	v, err := fleetwatch.Watch(t.Context(), unreachable(t), fleetwatch.Options{StartTimeout: 500 * time.Millisecond})
	require.ErrorIs(t, err, fleetwatch.ErrStartTimeout)
	assert.Nil(t, v)
	assert.Less(t, time.Since(start), 3*time.Second)
	assert.Contains(t, err.Error(), "after 500ms; last error:")
	t.Log(err)
}

// TestWatchAPIGivesUpAfterTheStartTimeout: a query API that keeps failing
// does not hang WatchAPI either.
func TestWatchAPIGivesUpAfterTheStartTimeout(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		http.Error(rw, "overloaded", http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)
	client := fleetcastv1connect.NewInformationServiceClient(testhttp.Client, srv.URL)
	_, err := fleetwatch.WatchAPI(t.Context(), client, fleetwatch.Options{StartTimeout: 300 * time.Millisecond})
	require.ErrorIs(t, err, fleetwatch.ErrStartTimeout)
	assert.Contains(t, err.Error(), "unavailable")

	// Without a timeout, the caller's context bounds the wait.
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err = fleetwatch.WatchAPI(ctx, client, fleetwatch.Options{StartTimeout: -1})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.False(t, errors.Is(err, fleetwatch.ErrStartTimeout))
}
