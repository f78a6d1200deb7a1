package query_test

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
	fleetcastv1 "github.com/fleetcast/fleetcast/gen/fleetcast/v1"
	"github.com/fleetcast/fleetcast/internal/watchtest"
)

// TestADocumentNoAnswerCanHoldFailsNoAnswer: stored documents that no
// answer can encode — an autoscaler's last scale after year 9999, an
// observedAt past it, a label that is not UTF-8 (written by anything but
// the ingest function, which bounds every time) — are left out of every
// answer, and the other fleets are answered: /v1/fleets, /v1/labels,
// Inform over every protocol, and the initial set of every watch.
func TestADocumentNoAnswerCanHoldFailsNoAnswer(t *testing.T) {
	srv, mem := serverOver(t)
	poison := func(seq int64, name string, edit func(*fleet.Document)) {
		d := fleet.Document{Cluster: "pc", Namespace: "games", Name: name, UID: "u", Version: fleet.Version{Term: 2, Seq: seq},
			Labels: map[string]string{"platform": "pc", "app.kubernetes.io/version": "1.42"}, Spec: &fleet.Spec{Replicas: 1},
			Status: &fleet.DocStatus{Replicas: 1, ReadyReplicas: 1}, ObservedAt: time.Now(), IngestedAt: time.Now()}
		edit(&d)
		mem.PutFleet(d)
	}
	poison(100, "scaled-in-year-10000", func(d *fleet.Document) {
		d.Autoscalers = []fleet.Autoscaler{{Name: "a", Status: fleet.AutoscalerStatus{LastScaleTime: fleet.MaxMicros + 1}}}
	})
	poison(101, "observed-in-year-10000", func(d *fleet.Document) { d.ObservedAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) })
	poison(102, "not-utf8", func(d *fleet.Document) { d.Labels["note"] = "\xff" })

	l := getList(t, srv.URL+"/v1/fleets?cluster=pc")
	assert.Len(t, l.Items, 4, "the four good fleets of pc, and none of the three")
	resp, err := http.Get(srv.URL + "/v1/labels/app.kubernetes.io%2Fversion")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	for name, client := range clients(srv) {
		t.Run("Inform/"+name, func(t *testing.T) {
			got, err := client.Inform(t.Context(), connect.NewRequest(&fleetcastv1.InformRequest{Filter: &fleetcastv1.FleetFilter{Clusters: []string{"pc"}}}))
			require.NoError(t, err)
			assert.Len(t, got.Msg.FleetInformation, 4)
		})
	}
	for _, name := range watchtest.Protocols {
		t.Run("Watch/"+name, func(t *testing.T) {
			w := watchtest.Open(t, srv.URL, name, url.Values{"cluster": {"pc"}})
			defer w.Close()
			assert.Equal(t, []string{"cluster pc stale=false", "added pc/f0", "added pc/f1", "added pc/f2", "added pc/f3", "synced 4"},
				watchtest.Strings(w.Take(t, 6)))
		})
	}

	// A good fleet that turns into such a document leaves the answers
	// rather than keep a state it no longer has.
	poison(103, "f0", func(d *fleet.Document) { d.ObservedAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) })
	require.Eventually(t, func() bool { return len(getList(t, srv.URL+"/v1/fleets?cluster=pc").Items) == 3 }, 10*time.Second, 5*time.Millisecond)
	assert.Equal(t, []string{"f1", "f2", "f3"}, fleetNames(getList(t, srv.URL+"/v1/fleets?cluster=pc")))
}

func fleetNames(l fleetapi.FleetList) []string {
	var out []string
	for _, f := range l.Items {
		out = append(out, f.Name)
	}
	return out
}
