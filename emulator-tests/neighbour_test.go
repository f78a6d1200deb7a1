package emulatortests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/functions/ingest"
	"github.com/fleetcast/fleetcast/internal/testenv/emulator"
	"github.com/fleetcast/fleetcast/internal/testenv/testhttp"
	"github.com/fleetcast/fleetcast/pubsubtopic"
)

// cloudRun stands in for Cloud Run in front of a function: at most
// concurrency requests at once (max_instance_request_concurrency ×
// max_instance_count); past it, the load balancer refuses a request at
// once with 429 ("no available instance"), before the function sees it.
func cloudRun(tb testing.TB, target string, concurrency int) string {
	tb.Helper()
	u, err := url.Parse(target)
	require.NoError(tb, err)
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.Transport = pooled(concurrency)
	slots := make(chan struct{}, concurrency)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
			proxy.ServeHTTP(w, r)
		default:
			http.Error(w, "Rejected by the load balancer: no available instance", http.StatusTooManyRequests)
		}
	}))
	tb.Cleanup(srv.Close)
	return srv.URL + "/"
}

// pushModel stands in for Pub/Sub's push delivery of one subscription, by
// its documented rule (cloud.google.com/pubsub/docs/push, "Push backoff"
// and "Delivery rate"): at most a push window of requests outstanding;
// the window grows by one with each success and shrinks with each failure
// (halved here, never below one); a failed message is retried after the
// subscription's retry policy's backoff, doubling from its minimum to its
// maximum. The emulator pushes a few requests at a time whatever the
// answers, so it cannot show one subscription crowding out another.
type pushModel struct {
	url                    string
	minBackoff, maxBackoff time.Duration
	mu                     sync.Mutex
	window, outstanding    int
	wake                   chan struct{}
	delivered, failed      atomic.Int64
}

func newPushModel(front, cluster string, minBackoff, maxBackoff time.Duration) *pushModel {
	return &pushModel{url: front + pubsubtopic.TopicName(project, topicOf(cluster)), minBackoff: minBackoff, maxBackoff: maxBackoff,
		window: 1, wake: make(chan struct{}, 1)}
}

// deliver pushes ev until it is acknowledged or ctx ends, and returns
// when it was acknowledged.
func (m *pushModel) deliver(ctx context.Context, tb testing.TB, ev fleet.Event) (time.Time, bool) {
	at, _, ok := m.deliverCounted(ctx, tb, ev)
	return at, ok
}

// deliverCounted is deliver, also saying how many attempts it took (what
// Pub/Sub compares with max_delivery_attempts).
func (m *pushModel) deliverCounted(ctx context.Context, tb testing.TB, ev fleet.Event) (time.Time, int, bool) {
	msg, err := pubsubtopic.Message(ev)
	require.NoError(tb, err)
	body, err := json.Marshal(ingest.MessagePublishedData{Message: ingest.PubsubMessage{
		Data: msg.Data, Attributes: msg.Attributes, MessageID: fmt.Sprintf("%s-%d-%d", ev.Cluster, ev.Version.Seq, time.Now().UnixNano()),
		PublishTime: time.Now()}, Subscription: "projects/" + project + "/subscriptions/model"})
	require.NoError(tb, err)
	backoff := m.minBackoff
	for attempts := 1; ctx.Err() == nil; attempts++ {
		if !m.acquire(ctx) {
			return time.Time{}, attempts - 1, false
		}
		ok := m.push(ctx, body)
		m.release(ok)
		if ok {
			m.delivered.Add(1)
			return time.Now(), attempts, true
		}
		m.failed.Add(1)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, m.maxBackoff)
	}
	return time.Time{}, 0, false
}

func (m *pushModel) push(ctx context.Context, body []byte) bool {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, m.url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := pushClient.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode/100 == 2
}

// pushClient keeps its connections, as Pub/Sub's push does: a flood of
// short requests over new connections would run the machine out of
// ephemeral ports (each closed one waits a minute in TIME_WAIT).
var pushClient = testhttp.New(pooled(128))

// pooled is a transport keeping up to n idle connections per host.
func pooled(n int) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns, t.MaxIdleConnsPerHost = n, n
	return t
}

func (m *pushModel) acquire(ctx context.Context) bool {
	for {
		m.mu.Lock()
		if m.outstanding < m.window {
			m.outstanding++
			m.mu.Unlock()
			return true
		}
		m.mu.Unlock()
		select {
		case <-ctx.Done():
			return false
		case <-m.wake:
		}
	}
}

func (m *pushModel) release(ok bool) {
	m.mu.Lock()
	m.outstanding--
	if ok {
		m.window++
	} else {
		m.window = max(1, m.window/2)
	}
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// floodBeside runs, for d, a cluster flooding the ingest function through a
// stand-in for Cloud Run of the given concurrency (fleets changing as
// fast as the function takes them, 64 pushers deep) beside a victim
// heartbeating every heartbeat, the function started with env; it returns
// how many of the flood's events landed and the victim's longest wait
// between two of its heartbeats landing.
func floodBeside(t *testing.T, d, heartbeat time.Duration, concurrency int, env ...string) (flooded int64, longest time.Duration) {
	t.Helper()
	fn, err := startFunctionTarget("IngestFleetEvents", emulator.Host(t, emulator.FirestoreHostEnv), env...)
	require.NoError(t, err)
	defer fn.stop()
	front := cloudRun(t, fn.url, concurrency)
	flood, victim := fleetEvents(t, "flood"), fleetEvents(t, "victim")
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	floodPush := newPushModel(front, flood.cluster, 100*time.Millisecond, 6*time.Second)
	victimPush := newPushModel(front, victim.cluster, 100*time.Millisecond, 6*time.Second)
	var wg sync.WaitGroup
	var seq atomic.Int64
	for range 64 {
		wg.Go(func() {
			for ctx.Err() == nil {
				n := seq.Add(1)
				floodPush.deliver(ctx, t, flood.upsert(fmt.Sprintf("f%04d", n%2000), n, n%10))
			}
		})
	}
	last := time.Now()
	for s := int64(1); ctx.Err() == nil; s++ {
		at, ok := victimPush.deliver(ctx, t, victim.snapshot(s, nil))
		if !ok {
			break
		}
		longest = max(longest, at.Sub(last))
		last = at
		select {
		case <-ctx.Done():
		case <-time.After(heartbeat):
		}
	}
	longest = max(longest, time.Since(last))
	cancel()
	wg.Wait()
	t.Logf("flood: %d events landed, %d asked again; victim: %d heartbeats, %d asked again, longest gap %v",
		floodPush.delivered.Load(), floodPush.failed.Load(), victimPush.delivered.Load(), victimPush.failed.Load(), longest.Round(time.Millisecond))
	return floodPush.delivered.Load(), longest
}

// fleetEvents is a cluster's event maker, without a topic: the push model
// delivers them.
func fleetEvents(tb testing.TB, name string) *pipeline {
	return &pipeline{tb: tb, cluster: name + "-" + randomHex(tb, 3)}
}

// TestAFloodingClusterCannotMakeAnotherStale: one cluster floods the
// shared ingest function as fast as it takes events, through a stand-in
// for Cloud Run (8 requests at once) and Pub/Sub's push window; another
// heartbeats every 200 ms. Each cluster holds at most its share of the
// instance's requests (MAX_CLUSTER_IN_FLIGHT=4, half of them): the flood's
// push window shrinks with each event asked again, and stays below what
// fills the instance; the victim's heartbeats land: it never goes
// STALE_AFTER (here 2 s) without one, while the flood lands as much as
// before. Measured: without the share the victim went 3.4 s without a
// heartbeat, refused by a full instance 26 times in 15 s (its push window
// and retry backoff shrink and grow against it); with half, 0.33 s, once.
func TestAFloodingClusterCannotMakeAnotherStale(t *testing.T) {
	const staleAfter = 2 * time.Second
	flooded, longest := floodBeside(t, 15*time.Second, 200*time.Millisecond, 8, "MAX_CLUSTER_IN_FLIGHT=4")
	assert.Less(t, longest, staleAfter, "the victim's heartbeats kept landing")
	assert.Greater(t, flooded, int64(1000), "and the flood is slowed, not stopped")

}
