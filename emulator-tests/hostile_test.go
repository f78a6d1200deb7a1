package emulatortests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/functions/query"
	"github.com/fleetcast/fleetcast/internal/testenv/syncbuf"
	"github.com/fleetcast/fleetcast/internal/testenv/testhttp"
	"github.com/fleetcast/fleetcast/logging"
	"github.com/fleetcast/fleetcast/pubsubtopic"
)

// TestOneClustersTimesCannotBreakAnswersAboutOthers: a fleet whose
// autoscaler last scaled after year 9999, sent on its own cluster's topic
// (the Avro schema accepts any long), is ingested without its autoscalers,
// marked degraded; a document stored with such a time by anything else is
// left out of the view. Either way /v1/fleets over every cluster and
// Connect's Inform answer, with the other cluster's fleets.
func TestOneClustersTimesCannotBreakAnswersAboutOthers(t *testing.T) {
	tenant, other := newPipeline(t), newPipeline(t)
	require.Equal(t, "created", other.publishAndWait(other.upsert("honest", 1, 3)))

	ev := withRolloutAndAutoscaler(tenant.upsert("far-future", 1, 3))
	msg, err := pubsubtopic.Message(ev)
	require.NoError(t, err)
	at := fmt.Sprintf(`"lastScaleTime":%d`, ev.Fleet.Autoscalers[0].Status.LastScaleTime)
	require.Contains(t, string(msg.Data), at)
	msg.Data = bytes.Replace(msg.Data, []byte(at), fmt.Appendf(nil, `"lastScaleTime":%d`, int64(math.MaxInt64)), 1)
	lines := tenant.fn.logs.waitMessage(t, tenant.publishMessage(msg), ingested)
	assert.Equal(t, "created", outcomeOf(lines), "accepted by the topic's schema, and ingested")
	d, _ := tenant.doc("far-future")
	assert.Empty(t, d.Autoscalers)
	assert.NotNil(t, d.Rollout, "only what does not fit is dropped")
	assert.Contains(t, d.Degraded, "at ingest, dropped autoscalers")

	// Written by anything but the function: left out of answers.
	k := fleet.Key{Cluster: tenant.cluster, Namespace: "default", Name: "poisoned"}
	poisoned := *fleet.Tombstone(k, fleet.Version{Term: 1, Seq: 1}, fleet.Publisher{ID: "x"}, time.Now(), time.Now(), time.Hour)
	poisoned.Deleted, poisoned.ExpireAt, poisoned.UID = false, nil, "u"
	poisoned.Spec, poisoned.Status = &fleet.Spec{Replicas: 1}, &fleet.DocStatus{Replicas: 1, ReadyReplicas: 1}
	poisoned.Autoscalers = []fleet.Autoscaler{{Name: "a", Status: fleet.AutoscalerStatus{LastScaleTime: math.MaxInt64}}}
	_, err = tenant.fs.Collection(firestoredb.FleetsCollection).Doc(k.DocID()).Set(t.Context(), poisoned)
	require.NoError(t, err)

	logs := &syncbuf.Buffer{}
	log := logging.New(logs, logging.LevelWarning)
	svc := fleetapi.NewService(firestoredb.New(tenant.fs, time.Hour, time.Now), fleetapi.Options{MaxStaleness: -1, ClusterRefresh: -1, Log: log})
	srv := httptest.NewServer(query.NewHandler(svc, log))
	defer srv.Close()
	resp, err := testhttp.Client.Get(srv.URL + "/v1/fleets?includeStale=true&pageSize=1000&cluster=" + tenant.cluster + "&cluster=" + other.cluster)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	var l fleetapi.FleetList
	require.NoError(t, json.Unmarshal(body, &l))
	var got []string
	for _, f := range l.Items {
		got = append(got, f.Name)
	}
	assert.ElementsMatch(t, []string{"far-future", "honest"}, got)

	resp, err = testhttp.Client.Post(srv.URL+"/fleetcast.v1.InformationService/Inform", "application/json", strings.NewReader(`{"filter":{"includeStale":true}}`))
	require.NoError(t, err)
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "Connect JSON over every cluster: %s", body)
	var named []any
	for line := range strings.Lines(logs.String()) {
		var l map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &l), line)
		if l["severity"] == "ERROR" && l["message"] == "query view: a fleet document no answer can hold is left out" {
			named = append(named, l[logging.KeyFleet])
		}
	}
	require.NotEmpty(t, named, "an ERROR line says a document was left out: %s", logs)
	assert.Contains(t, named, k.DocID(), "the line names the document")
}
