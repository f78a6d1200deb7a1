package publisher_test

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/internal/testenv/kubetest"
	"github.com/fleetcast/fleetcast/internal/testenv/testhttp"
)

func freeAddr(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(tb, err)
	defer l.Close()
	return l.Addr().String()
}

func get(tb testing.TB, url string) (int, string) {
	tb.Helper()
	resp, err := testhttp.Client.Get(url)
	require.NoError(tb, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(tb, err)
	return resp.StatusCode, string(b)
}

// TestOperationsEndpoints: /healthz, /readyz (synced and, as leader,
// publishing) and the metrics an operator alerts on.
func TestOperationsEndpoints(t *testing.T) {
	e := newNamespace(t)
	rec := newRecorder()
	cfg := kubetest.Config("pc", e.Name)
	cfg.LeaderElect = true
	cfg.MetricsAddr = freeAddr(t)
	base := "http://" + cfg.MetricsAddr
	p := kubetest.StartPublisher(t, cfg, cp.RESTConfig(), rec)
	rec.waitFor(t, "the first snapshot", func(evs []fleet.Event) bool { return len(evs) > 0 })

	code, _ := get(t, base+"/healthz")
	assert.Equal(t, http.StatusOK, code)
	code, _ = get(t, base+"/readyz")
	assert.Equal(t, http.StatusOK, code)
	_, metrics := get(t, base+"/metrics")
	assert.Contains(t, metrics, "fleetcast_publisher_leader 1")
	assert.Contains(t, metrics, "fleetcast_publisher_term ")
	assert.NotContains(t, metrics, "fleetcast_publisher_term 0\n")
	assert.Contains(t, metrics, `fleetcast_publisher_publishes_total{kind="CLUSTER_SNAPSHOT",result="ok"} 1`)
	assert.Contains(t, metrics, "fleetcast_publisher_last_snapshot_timestamp_seconds")
	assert.Contains(t, metrics, "go_goroutines", "runtime metrics too")

	// A leader that cannot publish is not ready.
	rec.mu.Lock()
	rec.down = true
	rec.mu.Unlock()
	e.CreateFleet(e.Name, "unsent", nil)
	require.Eventually(t, func() bool { return !p.Sender.Healthy() }, 10*time.Second, 10*time.Millisecond)
	code, body := get(t, base+"/readyz")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, body, "publishing fails")
	_, metrics = get(t, base+"/metrics")
	assert.Contains(t, metrics, "fleetcast_publisher_pending_fleets 1")
	assert.True(t, strings.Contains(metrics, `fleetcast_publisher_publishes_total{kind="FLEET_UPSERT",result="error"}`))
}

// TestShutdownFlushesAndReleasesTheLease: on SIGTERM (ctx cancelled) a
// pending trailing publish goes out at once, and the Lease is released so
// a standby need not wait for it to expire.
func TestShutdownFlushesAndReleasesTheLease(t *testing.T) {
	e := newNamespace(t)
	rec := newRecorder()
	cfg := kubetest.Config("pc", e.Name)
	cfg.LeaderElect = true
	cfg.MinInterval = time.Hour // the trailing publish would never come by itself
	p := kubetest.StartPublisher(t, cfg, cp.RESTConfig(), rec)
	e.CreateFleet(e.Name, "f", nil)
	rec.waitFor(t, "the create", func(evs []fleet.Event) bool { return len(fleetEvents(evs)) == 1 })
	setReady(e, e.Name, "f", 3)
	require.Eventually(t, func() bool {
		keys := map[string]struct{}{}
		p.Agent.PendingKeys(keys)
		return len(keys) == 1
	}, 10*time.Second, 10*time.Millisecond, "the status change waits for its interval")

	p.Stop()
	evs := fleetEvents(rec.all())
	require.Len(t, evs, 2)
	assert.Equal(t, int64(3), evs[1].Fleet.Status.ReadyReplicas, "flushed at shutdown")

	lease, err := kubernetes.NewForConfigOrDie(cp.RESTConfig()).CoordinationV1().Leases(e.Name).Get(t.Context(), cfg.LeaseName, metav1.GetOptions{})
	require.NoError(t, err)
	assert.True(t, lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "", "the Lease is released")
	assert.NotEmpty(t, lease.Annotations["fleetcast.dev/term"], "the term stays for the next writer")
}
