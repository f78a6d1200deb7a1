package emulatortests

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/internal/testenv/emulator"
	"github.com/fleetcast/fleetcast/internal/testenv/testhttp"
)

// TestFirestoreOutageIsRetriedAndNothingLost cuts the function off from
// Firestore: it must answer 500, so Pub/Sub redelivers, and every event
// must land once Firestore is back, the newest winning.
func TestFirestoreOutageIsRetriedAndNothingLost(t *testing.T) {
	proxy := newFaultProxy(t, emulator.Host(t, emulator.FirestoreHostEnv))
	fn, err := startFunction(proxy.addr())
	require.NoError(t, err)
	t.Cleanup(fn.stop)
	p := newPipelineTo(t, fn)

	proxy.setDown(true)
	body := mustJSON(t, map[string]any{
		"message":      map[string]any{"data": mustEncode(t, p.upsert("direct", 1, 1)), "messageId": "outage-direct"},
		"subscription": "projects/" + project + "/subscriptions/direct",
	})
	resp, err := testhttp.Client.Post(pushURL(fn, p.cluster), "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusInternalServerError, resp.StatusCode, "a transient error asks for redelivery")

	// Through Pub/Sub: three versions of one fleet and another fleet, all
	// published while Firestore is unreachable.
	ids := []string{
		p.publish(p.upsert("a", 1, 1)),
		p.publish(p.upsert("a", 2, 2)),
		p.publish(p.upsert("b", 3, 7)),
		p.publish(p.upsert("a", 4, 3)),
	}
	// The first delivery fails (and is logged as a redelivery request) ...
	fn.logs.waitMessage(t, ids[0], func(lines []map[string]any) bool { return len(lines) > 0 })
	require.Equal(t, "WARNING", fn.logs.matching("messageId", ids[0])[0]["severity"])
	// ... and once Firestore is back, every message lands.
	proxy.setDown(false)
	for _, id := range ids {
		fn.logs.waitMessage(t, id, ingested)
	}
	a, _ := p.doc("a")
	assert.Equal(t, int64(4), a.Version.Seq)
	assert.Equal(t, int64(3), a.Status.ReadyReplicas)
	b, _ := p.doc("b")
	assert.Equal(t, int64(7), b.Status.ReadyReplicas)
}

func mustEncode(tb testing.TB, ev fleet.Event) []byte {
	tb.Helper()
	b, err := fleet.EncodeEvent(ev)
	require.NoError(tb, err)
	return b
}

// faultProxy forwards TCP connections to target; while down it cuts every
// connection and refuses new ones by closing them at once.
type faultProxy struct {
	target string
	l      net.Listener
	mu     sync.Mutex
	down   bool
	conns  map[net.Conn]struct{}
}

func newFaultProxy(tb testing.TB, target string) *faultProxy {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(tb, err)
	p := &faultProxy{target: target, l: l, conns: map[net.Conn]struct{}{}}
	go p.serve()
	tb.Cleanup(func() {
		l.Close()
		p.setDown(true)
	})
	return p
}

func (p *faultProxy) addr() string { return p.l.Addr().String() }

func (p *faultProxy) setDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for c := range p.conns {
			c.Close()
		}
	}
}

func (p *faultProxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.down {
			p.mu.Unlock()
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		go p.pipe(c, up)
		go p.pipe(up, c)
	}
}

func (p *faultProxy) pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}
