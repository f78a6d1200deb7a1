// Package watchtest reads a watch of the query API off every protocol it
// is served over — Connect, gRPC-Web, gRPC and Server-Sent Events — as
// one kind of event, for tests.
package watchtest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/fleetcast/fleetcast/fleetapi"
	fleetcastv1 "github.com/fleetcast/fleetcast/gen/fleetcast/v1"
	"github.com/fleetcast/fleetcast/gen/fleetcast/v1/fleetcastv1connect"
	"github.com/fleetcast/fleetcast/internal/testenv/testhttp"
)

// Event is a watch event as a test reads it off any protocol.
type Event struct {
	Kind  string // added, modified, removed, cluster, synced, restart
	Name  string // cluster/fleet, or cluster
	Ready int64
	Stale bool
	Count int
	Token string
}

func (e Event) String() string {
	switch e.Kind {
	case "synced":
		return fmt.Sprintf("synced %d", e.Count)
	case "cluster":
		return fmt.Sprintf("cluster %s stale=%t", e.Name, e.Stale)
	case "added", "modified", "removed":
		return e.Kind + " " + e.Name
	}
	return e.Kind
}

// Stream is one open watch.
type Stream struct {
	next  func(t *testing.T) Event
	close func()
	stale map[string]bool // each cluster's staleness as last reported
}

// Next returns the stream's next event other than a heartbeat: of the
// stream, or of a cluster (a cluster event that changes no staleness).
func (s Stream) Next(t *testing.T) Event {
	t.Helper()
	return s.next(t)
}

// withoutBeats makes s skip the cluster events that change no staleness
// from what known holds: the clusters' heartbeats, which come at the
// publishers' pace.
func (s Stream) withoutBeats(known map[string]bool) Stream {
	stale := maps.Clone(known)
	if stale == nil {
		stale = map[string]bool{}
	}
	s.stale = stale
	next := s.next
	s.next = func(t *testing.T) Event {
		t.Helper()
		for {
			e := next(t)
			switch e.Kind {
			case "restart":
				clear(stale)
			case "cluster":
				if was, ok := stale[e.Name]; ok && was == e.Stale {
					continue
				}
				stale[e.Name] = e.Stale
			}
			return e
		}
	}
	return s
}

// Close ends the watch, as a client going away.
func (s Stream) Close() { s.close() }

// Lifetime bounds a test's stream: an event that never comes fails the
// test then rather than hanging it.
const Lifetime = time.Minute

// SubscriptionLifetime bounds Subscribe's streams, which last as long as
// the test or benchmark that opened them: longer than any of them runs.
const SubscriptionLifetime = 90 * time.Minute

// Protocols names every protocol a watch is served over.
var Protocols = []string{"sse", "connect", "connect-json", "grpc-web", "grpc (h2c)"}

// Clients are the generated client over each protocol connect-go speaks.
func Clients(url string) map[string]fleetcastv1connect.InformationServiceClient {
	h2c := testhttp.New(&http.Transport{Protocols: func() *http.Protocols {
		p := new(http.Protocols)
		p.SetUnencryptedHTTP2(true)
		return p
	}()})
	return map[string]fleetcastv1connect.InformationServiceClient{
		"connect":      fleetcastv1connect.NewInformationServiceClient(testhttp.Client, url),
		"connect-json": fleetcastv1connect.NewInformationServiceClient(testhttp.Client, url, connect.WithProtoJSON()),
		"grpc-web":     fleetcastv1connect.NewInformationServiceClient(testhttp.Client, url, connect.WithGRPCWeb()),
		"grpc (h2c)":   fleetcastv1connect.NewInformationServiceClient(h2c, url, connect.WithGRPC()),
	}
}

// Open opens a watch of the server at url over protocol (one of
// Protocols): filters and resumeToken as /v1/watch's parameters. The
// server must serve HTTP/2 without TLS for gRPC.
func Open(t *testing.T, url, protocol string, params url.Values) Stream {
	t.Helper()
	return open(t, url, protocol, params, nil)
}

// Resume opens a watch as Open does, for a client that held what the
// stream from had delivered: a cluster event that changes no staleness
// from what from reported is skipped as a heartbeat.
func Resume(t *testing.T, url, protocol string, params url.Values, from Stream) Stream {
	t.Helper()
	return open(t, url, protocol, params, from.stale)
}

func open(t *testing.T, url, protocol string, params url.Values, known map[string]bool) Stream {
	t.Helper()
	if protocol == "sse" {
		return openSSE(t, url, params).withoutBeats(known)
	}
	c, ok := Clients(url)[protocol]
	require.True(t, ok, "no protocol %q", protocol)
	return openRPC(t, c, params).withoutBeats(known)
}

func openRPC(t *testing.T, c fleetcastv1connect.InformationServiceClient, params url.Values) Stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), Lifetime)
	req := &fleetcastv1.WatchFleetsRequest{Filter: &fleetcastv1.FleetFilter{Clusters: params["cluster"], Selector: params.Get("selector"),
		IncludeStale: params.Get("includeStale") == "true"}, ResumeToken: params.Get("resumeToken")}
	st, err := c.WatchFleets(ctx, connect.NewRequest(req))
	require.NoError(t, err)
	return Stream{close: cancel, next: func(t *testing.T) Event {
		t.Helper()
		for {
			require.True(t, st.Receive(), "stream ended: %v", st.Err())
			m := st.Msg()
			e := Event{Token: m.GetResumeToken()}
			switch ev := m.GetEvent().(type) {
			case *fleetcastv1.WatchFleetsResponse_Fleet:
				f := ev.Fleet.GetFleet()
				e.Kind = strings.ToLower(strings.TrimPrefix(ev.Fleet.GetType().String(), "CHANGE_TYPE_"))
				e.Name, e.Ready, e.Stale = f.GetClusterName()+"/"+f.GetFleetName(), f.GetReadyGameservers(), f.GetStale()
			case *fleetcastv1.WatchFleetsResponse_Cluster:
				e.Kind, e.Name, e.Stale = "cluster", ev.Cluster.GetCluster().GetClusterName(), ev.Cluster.GetCluster().GetStale()
			case *fleetcastv1.WatchFleetsResponse_Synced:
				e.Kind, e.Count = "synced", int(ev.Synced.GetFleetCount())
			case *fleetcastv1.WatchFleetsResponse_Restart:
				e.Kind = "restart"
			case *fleetcastv1.WatchFleetsResponse_Heartbeat:
				continue
			default:
				t.Fatalf("unknown event %v", m)
			}
			return e
		}
	}}
}

// openSSE reads GET /v1/watch as a browser's EventSource does.
func openSSE(t *testing.T, srvURL string, params url.Values) Stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), Lifetime)
	token := params.Get("resumeToken")
	params = cloneWithout(params, "resumeToken")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srvURL+"/v1/watch?"+params.Encode(), nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "text/event-stream")
	if token != "" {
		req.Header.Set("Last-Event-ID", token)
	}
	resp, err := testhttp.Client.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	return Stream{close: func() { cancel(); resp.Body.Close() }, next: func(t *testing.T) Event {
		t.Helper()
		for {
			var id, kind, data string
			for sc.Scan() && sc.Text() != "" {
				field, value, _ := strings.Cut(sc.Text(), ": ")
				switch field {
				case "id":
					id = value
				case "event":
					kind = value
				case "data":
					data = value
				}
			}
			require.NoError(t, sc.Err())
			require.NotEmpty(t, kind, "stream ended")
			e := Event{Kind: kind, Token: id}
			switch kind {
			case "heartbeat":
				continue
			case "added", "modified", "removed":
				var f fleetapi.Fleet
				require.NoError(t, json.Unmarshal([]byte(data), &f))
				e.Name, e.Ready, e.Stale = f.Cluster+"/"+f.Name, f.ReadyReplicas, f.Stale
			case "cluster":
				var c fleetapi.Cluster
				require.NoError(t, json.Unmarshal([]byte(data), &c))
				e.Name, e.Stale = c.Cluster, c.Stale
			case "synced":
				var s struct{ FleetCount int }
				require.NoError(t, json.Unmarshal([]byte(data), &s))
				e.Count = s.FleetCount
			}
			return e
		}
	}}
}

func cloneWithout(v url.Values, name string) url.Values {
	out := url.Values{}
	for k, vals := range v {
		if k != name {
			out[k] = vals
		}
	}
	return out
}

// Take returns the next n events.
func (s Stream) Take(t *testing.T, n int) []Event {
	t.Helper()
	out := make([]Event, 0, n)
	for range n {
		out = append(out, s.next(t))
	}
	return out
}

// Strings are the events as their String.
func Strings(events []Event) []string {
	out := make([]string, 0, len(events))
	for _, e := range events {
		out = append(out, e.String())
	}
	return out
}

// Subscribe opens n WatchFleets streams of req through client, as n
// subscribers would, and returns once each has received its initial set.
// Each stream calls saw with its index for every fleet event, from its own
// goroutine, until the test ends. A stream the server ends (its write
// timeout cut a subscriber it could not serve in time, on a loaded
// machine) resumes from the last resume token it handled, as a client of
// the API does: the changes it missed follow, none lost; the returned
// count says how many resumed. A stream that cannot resume fails the
// test.
func Subscribe(tb testing.TB, client fleetcastv1connect.InformationServiceClient, n int, req *fleetcastv1.WatchFleetsRequest,
	saw func(sub int, f *fleetcastv1.FleetInformation)) *atomic.Int64 {
	tb.Helper()
	// The streams last until the cleanup, within a deadline of their own
	// (testhttp's would end them at two minutes).
	ctx, cancel := context.WithTimeout(context.Background(), SubscriptionLifetime)
	var wg sync.WaitGroup
	tb.Cleanup(func() { cancel(); wg.Wait() })
	synced := make(chan struct{}, n)
	resumed := new(atomic.Int64)
	for i := range n {
		st, err := client.WatchFleets(ctx, connect.NewRequest(req))
		require.NoError(tb, err)
		wg.Go(func() {
			first, token := true, ""
			for {
				for st.Receive() {
					token = st.Msg().GetResumeToken()
					switch ev := st.Msg().GetEvent().(type) {
					case *fleetcastv1.WatchFleetsResponse_Synced:
						if first {
							synced <- struct{}{}
							first = false
						}
					case *fleetcastv1.WatchFleetsResponse_Fleet:
						saw(i, ev.Fleet.GetFleet())
					}
				}
				st.Close()
				if ctx.Err() != nil {
					return
				}
				cut := st.Err()
				again := proto.CloneOf(req)
				again.ResumeToken = token
				if st, err = client.WatchFleets(ctx, connect.NewRequest(again)); err != nil {
					if ctx.Err() == nil {
						tb.Errorf("subscriber %d: its stream ended (%v) and it could not resume: %v", i, cut, err)
					}
					return
				}
				resumed.Add(1)
			}
		})
	}
	for range n {
		select {
		case <-synced:
		case <-time.After(Lifetime):
			tb.Fatalf("the %d subscribers did not all receive their initial set", n)
		}
	}
	return resumed
}
