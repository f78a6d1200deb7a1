package emulatortests

import (
	"io"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/functions/query"
	"github.com/fleetcast/fleetcast/internal/testenv/controlplane"
	"github.com/fleetcast/fleetcast/internal/testenv/kubetest"
	"github.com/fleetcast/fleetcast/logging"
)

// TestRolloutAndAutoscalerReachTheAPI runs the whole pipeline — the API
// server with Agones' CRDs, a publisher, the topic, the ingest function,
// Firestore, the query API — while the test plays Agones: a fleet with its
// GameServerSet and a FleetAutoscaler, then a rollout to a new template.
// The rollout and the autoscaler's policy and status reach Firestore, and
// the API answers them (validated against the OpenAPI document) and
// filters on rolloutComplete.
func TestRolloutAndAutoscalerReachTheAPI(t *testing.T) {
	c := controlplane.Require(t, cp, cpErr)
	p := newPipeline(t)
	ns := kubetest.NewNamespace(t, c)
	p.nsName = ns.Name
	kubetest.StartPublisher(t, p.publisherConfig(ns.Name), c.RESTConfig(), p.transport(""))

	ns.CreateFleet(ns.Name, "rolling", map[string]string{"platform": "pc"})
	ns.CreateGameServerSet(ns.Name, "rolling", "rolling-v1", ns.FleetTemplate(ns.Name, "rolling"), 3)
	ns.SetGameServerSetStatus(ns.Name, "rolling-v1", map[string]any{"replicas": int64(3), "readyReplicas": int64(3)})
	ns.CreateFleetAutoscaler(ns.Name, "rolling-buffer", "rolling", map[string]any{
		"type": "Buffer", "buffer": map[string]any{"bufferSize": int64(2), "minReplicas": int64(1), "maxReplicas": int64(20)},
	}, 20)
	scaledAt := time.Now().Add(-time.Minute).UTC().Truncate(time.Second)
	ns.SetFleetAutoscalerStatus(ns.Name, "rolling-buffer", map[string]any{
		"currentReplicas": int64(3), "desiredReplicas": int64(4), "ableToScale": true, "scalingLimited": false,
		"lastScaleTime": scaledAt.Format(time.RFC3339),
	})
	ns.CreateFleet(ns.Name, "unrolled", nil) // no set yet: its rollout is unknown

	p.waitFleets("the rollout and the autoscaler in Firestore", []string{"rolling"}, func(_ string, d *fleet.Document) bool {
		return live("", d) && d.Rollout != nil && d.Rollout.Complete && len(d.Autoscalers) == 1 && d.Autoscalers[0].Status.DesiredReplicas == 4
	})
	p.waitFleets("the fleet without a set", []string{"unrolled"}, live)
	d, _ := p.doc("rolling")
	assert.Equal(t, []fleet.GameServerSet{{Name: "rolling-v1", Current: true, Replicas: 3, ReadyReplicas: 3}}, d.Rollout.Sets)
	assert.Equal(t, fleet.Autoscaler{
		Name:        "rolling-buffer",
		Policy:      fleet.AutoscalerPolicy{Type: "Buffer", BufferSize: "2", MinReplicas: 1, MaxReplicas: 20},
		SyncSeconds: 20,
		Status:      fleet.AutoscalerStatus{CurrentReplicas: 3, DesiredReplicas: 4, AbleToScale: true, LastScaleTime: fleet.MicrosOf(scaledAt)},
	}, d.Autoscalers[0])
	unrolled, _ := p.doc("unrolled")
	assert.Nil(t, unrolled.Rollout)
	assert.Nil(t, unrolled.Autoscalers)

	store := firestoredb.New(p.fs, time.Hour, time.Now)
	srv := httptest.NewServer(query.NewHandler(fleetapi.NewService(store, fleetapi.Options{MaxStaleness: -1, ClusterRefresh: -1}),
		logging.New(io.Discard, logging.LevelWarning)))
	t.Cleanup(srv.Close)
	a := &api{tb: t, srv: srv}
	base := "/v1/fleets?cluster=" + p.cluster
	fleetOf := func(r response) fleetapi.Fleet { return decode[fleetapi.Fleet](t, r) }
	f := fleetOf(a.get("/v1/fleets/" + p.cluster + "/" + ns.Name + "/rolling"))
	require.NotNil(t, f.Rollout)
	assert.True(t, f.Rollout.Complete)
	require.Len(t, f.Autoscalers, 1)
	assert.Equal(t, "Buffer", f.Autoscalers[0].Policy.Type)
	assert.Equal(t, int64(4), f.Autoscalers[0].DesiredReplicas)
	require.NotNil(t, f.Autoscalers[0].LastScaleTime)
	assert.True(t, scaledAt.Equal(*f.Autoscalers[0].LastScaleTime))
	assert.Nil(t, fleetOf(a.get("/v1/fleets/"+p.cluster+"/"+ns.Name+"/unrolled")).Rollout)
	assert.Equal(t, []string{p.cluster + "/" + ns.Name + "/rolling"}, names(decode[queryFleetList](t, a.get(base+"&rolloutComplete=true"))))
	assert.Empty(t, names(decode[queryFleetList](t, a.get(base+"&rolloutComplete=false"))), "an unknown rollout is not one in progress")

	// A new template: the rollout is in progress until the new set runs it all.
	ns.Patch(ns.Name, "rolling", map[string]any{"spec": map[string]any{"template": map[string]any{
		"spec": map[string]any{"ports": []any{map[string]any{"containerPort": int64(7777)}}},
	}}})
	ns.CreateGameServerSet(ns.Name, "rolling", "rolling-v2", ns.FleetTemplate(ns.Name, "rolling"), 3)
	ns.SetGameServerSetStatus(ns.Name, "rolling-v2", map[string]any{"replicas": int64(1), "readyReplicas": int64(1)})
	p.waitFleets("the rollout in progress", []string{"rolling"}, func(_ string, d *fleet.Document) bool {
		return d.Rollout != nil && !d.Rollout.Complete && len(d.Rollout.Sets) == 2
	})
	assert.Equal(t, []string{p.cluster + "/" + ns.Name + "/rolling"}, names(decode[queryFleetList](t, a.get(base+"&rolloutComplete=false"))))
	ns.SetGameServerSetStatus(ns.Name, "rolling-v1", map[string]any{"replicas": int64(0), "readyReplicas": int64(0)})
	ns.SetGameServerSetStatus(ns.Name, "rolling-v2", map[string]any{"replicas": int64(3), "readyReplicas": int64(3)})
	p.waitFleets("the rollout complete", []string{"rolling"}, func(_ string, d *fleet.Document) bool {
		return d.Rollout != nil && d.Rollout.Complete
	})
	f = fleetOf(a.get("/v1/fleets/" + p.cluster + "/" + ns.Name + "/rolling"))
	assert.Equal(t, []fleet.GameServerSet{{Name: "rolling-v1"}, {Name: "rolling-v2", Current: true, Replicas: 3, ReadyReplicas: 3}}, f.Rollout.Sets)
}
