package emulatortests

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pb33f/libopenapi"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/functions/query"
	"github.com/fleetcast/fleetcast/internal/testenv/controlplane"
	"github.com/fleetcast/fleetcast/internal/testenv/kubetest"
	"github.com/fleetcast/fleetcast/internal/testenv/testhttp"
	"github.com/fleetcast/fleetcast/internal/testenv/watchtest"
	"github.com/fleetcast/fleetcast/logging"
	"github.com/fleetcast/fleetcast/schemas"
)

// queryServer serves the query function over HTTP/1.1 and h2c, from a
// view of the pipeline's Firestore.
func queryServer(tb testing.TB, p *pipeline, opts fleetapi.Options) *httptest.Server {
	tb.Helper()
	log := logging.New(io.Discard, logging.LevelWarning)
	opts.Log = log
	srv := httptest.NewUnstartedServer(query.NewHandler(fleetapi.NewService(firestoredb.New(p.fs, time.Hour, time.Now), opts), log))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	tb.Cleanup(srv.Close)
	return srv
}

// publishedCluster is a pipeline whose cluster is a namespace of the
// control plane, with its publisher running and sending a heartbeat every
// 500 ms (well within the 3 s StaleAfter the watch tests use).
func publishedCluster(t *testing.T) (*pipeline, *kubetest.Namespace, *kubetest.Publisher) {
	t.Helper()
	c := controlplane.Require(t, cp, cpErr)
	p := newPipeline(t)
	ns := kubetest.NewNamespace(t, c)
	p.nsName = ns.Name
	cfg := p.publisherConfig(ns.Name)
	cfg.SnapshotInterval = 500 * time.Millisecond
	return p, ns, kubetest.StartPublisher(t, cfg, c.RESTConfig(), p.transport(""))
}

// TestWatchFollowsTheControlPlane: one watch over each protocol, all on one
// query instance, from a Fleet on the Kubernetes API server through the
// publisher, Pub/Sub and the ingest function to Firestore: the initial
// set, a status patch, a new fleet, a delete, the cluster going stale when
// its publisher stops; and a client that reconnects gets exactly what it
// missed.
func TestWatchFollowsTheControlPlane(t *testing.T) {
	p, ns, pub := publishedCluster(t)
	ns.CreateFleet(ns.Name, "ranked", map[string]string{"platform": "pc"})
	p.waitFleets("the fleet lands", []string{"ranked"}, live)

	srv := queryServer(t, p, fleetapi.Options{StaleAfter: 3 * time.Second, WatchPoll: 50 * time.Millisecond})
	params := url.Values{"cluster": {p.cluster}}
	streams := map[string]watchtest.Stream{}
	for _, proto := range watchtest.Protocols {
		streams[proto] = watchtest.Open(t, srv.URL, proto, params)
	}
	each := func(what string, want ...string) map[string][]watchtest.Event {
		t.Helper()
		got := map[string][]watchtest.Event{}
		for proto, s := range streams {
			got[proto] = s.Take(t, len(want))
			assert.Equal(t, want, watchtest.Strings(got[proto]), "%s over %s", what, proto)
		}
		return got
	}
	fleetName := p.cluster + "/ranked"
	each("the initial set", "cluster "+p.cluster+" stale=false", "added "+fleetName, "synced 1")

	ns.SetStatus(ns.Name, "ranked", map[string]any{"replicas": 5, "readyReplicas": 4, "allocatedReplicas": 1})
	patched := each("a status patch", "modified "+fleetName)
	for proto, events := range patched {
		assert.EqualValues(t, 4, events[0].Ready, proto)
	}

	// The SSE and gRPC clients go away; what they miss comes on their
	// resume, and nothing else.
	gone := map[string]watchtest.Stream{}
	for _, proto := range []string{"sse", "grpc (h2c)"} {
		streams[proto].Close()
		gone[proto] = streams[proto]
		delete(streams, proto)
	}
	ns.CreateFleet(ns.Name, "casual", map[string]string{"platform": "pc"})
	each("a new fleet", "added "+p.cluster+"/casual")
	ns.DeleteFleet(ns.Name, "ranked")
	each("a delete", "removed "+fleetName)
	for _, proto := range []string{"sse", "grpc (h2c)"} {
		s := watchtest.Resume(t, srv.URL, proto, url.Values{"cluster": {p.cluster}, "resumeToken": {patched[proto][0].Token}}, gone[proto])
		assert.Equal(t, []string{"added " + p.cluster + "/casual", "removed " + fleetName, "synced 1"}, watchtest.Strings(s.Take(t, 3)), proto)
		streams[proto] = s
	}

	// The publisher stops: no heartbeat, the cluster turns stale and its
	// fleets leave the set.
	pub.Stop()
	each("the cluster going stale", "cluster "+p.cluster+" stale=true", "removed "+p.cluster+"/casual")
	for _, s := range streams {
		s.Close()
	}
}

// TestWatchEventsMatchTheOpenAPIDocument: the data of every event GET
// /v1/watch sends is the schema the OpenAPI document names for its event,
// the closing error event included.
func TestWatchEventsMatchTheOpenAPIDocument(t *testing.T) {
	a := newAPI(t)
	seed(a)
	doc, err := libopenapi.NewDocument(schemas.QueryAPIOpenAPI)
	require.NoError(t, err)
	model, err := doc.BuildV3Model()
	require.NoError(t, err)
	schemaOf := map[string]string{"added": "Fleet", "modified": "Fleet", "removed": "Fleet", "cluster": "Cluster",
		"synced": "WatchSynced", "heartbeat": "Heartbeat", "error": "StreamError"}
	validator := schema_validation.NewSchemaValidator()

	log := logging.New(io.Discard, logging.LevelWarning)
	h := query.NewHandler(fleetapi.NewService(a.store, fleetapi.Options{Heartbeat: 100 * time.Millisecond, WatchPoll: 20 * time.Millisecond, Log: log}), log)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second) // the stream ends 2 s before: an error event
		defer cancel()
		h.ServeHTTP(w, r.WithContext(ctx))
	}))
	defer srv.Close()
	resp, err := testhttp.Client.Get(srv.URL + "/v1/watch?includeStale=true")
	require.NoError(t, err)
	defer resp.Body.Close()
	seen := map[string]int{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	kind := ""
	for sc.Scan() {
		field, value, _ := strings.Cut(sc.Text(), ": ")
		switch field {
		case "event":
			kind = value
		case "data":
			name, ok := schemaOf[kind]
			require.True(t, ok, "event %q is not in the OpenAPI document", kind)
			ok, errs := validator.ValidateSchemaString(model.Model.Components.Schemas.GetOrZero(name).Schema(), value)
			for _, e := range errs {
				t.Errorf("%s event: %s (%s): %s", kind, e.Message, e.Reason, value)
			}
			assert.True(t, ok)
			if seen[kind]++; kind == "synced" {
				a.put(fleetSpec{"pc", "games", "ranked", map[string]string{"platform": "pc"}, 1, 1, 1}) // modified
			}
		}
	}
	require.NoError(t, sc.Err())
	for _, k := range []string{"added", "modified", "cluster", "synced", "heartbeat", "error"} {
		assert.Positive(t, seen[k], "no %s event checked", k)
	}
}
