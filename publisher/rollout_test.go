package publisher_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/internal/testenv/kubetest"
	"github.com/fleetcast/fleetcast/publisher"
)

// lastUpsert is the newest upsert of a fleet among evs.
func lastUpsert(evs []fleet.Event, name string) (fleet.Event, bool) {
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Kind == fleet.KindUpsert && evs[i].Name == name {
			return evs[i], true
		}
	}
	return fleet.Event{}, false
}

// waitForState waits until the newest upsert of the fleet satisfies pred.
func (r *recorder) waitForState(tb testing.TB, what, name string, pred func(fleet.State) bool) fleet.State {
	tb.Helper()
	return r.waitForStateWithin(tb, waitTime, what, name, pred)
}

// waitForStateWithin is waitForState, giving up after d.
func (r *recorder) waitForStateWithin(tb testing.TB, d time.Duration, what, name string, pred func(fleet.State) bool) fleet.State {
	tb.Helper()
	evs := r.waitForWithin(tb, d, what, func(evs []fleet.Event) bool {
		ev, ok := lastUpsert(evs, name)
		return ok && pred(ev.Fleet)
	})
	ev, _ := lastUpsert(evs, name)
	return ev.Fleet
}

func sets(s fleet.State) map[string]fleet.GameServerSet {
	out := map[string]fleet.GameServerSet{}
	for _, set := range s.Rollout.Sets {
		out[set.Name] = set
	}
	return out
}

// TestRolloutProgress plays Agones' fleet controller through a rolling
// update on the real API server: a fleet's template changes, a second
// GameServerSet takes over from the first. The fleet's rollout is complete
// only once the old set is empty and the new one runs every desired
// replica.
func TestRolloutProgress(t *testing.T) {
	e := newNamespace(t)
	ns := e.Name
	rec := newRecorder()
	kubetest.StartPublisher(t, kubetest.Config("rollout", ns), cp.RESTConfig(), rec)

	e.CreateFleet(ns, "rolling", nil)
	// The set's template as Agones writes it from Go types: the same
	// template, with the zero values the fleet's author left out.
	v1 := e.FleetTemplate(ns, "rolling")
	written := map[string]any{"metadata": map[string]any{"creationTimestamp": nil}, "spec": v1["spec"]}
	e.CreateGameServerSet(ns, "rolling", "rolling-v1", written, 3)
	e.SetGameServerSetStatus(ns, "rolling-v1", map[string]any{"replicas": int64(3), "readyReplicas": int64(3)})
	s := rec.waitForState(t, "the first set, complete", "rolling", func(s fleet.State) bool { return s.Rollout.Complete })
	assert.Equal(t, []fleet.GameServerSet{{Name: "rolling-v1", Current: true, Replicas: 3, ReadyReplicas: 3}}, s.Rollout.Sets)

	// The fleet's template changes: its one set is no longer current.
	e.Patch(ns, "rolling", map[string]any{"spec": map[string]any{"template": map[string]any{
		"metadata": map[string]any{"labels": map[string]any{"version": "2"}},
		"spec":     map[string]any{"ports": []any{map[string]any{"containerPort": int64(7655)}}},
	}}})
	s = rec.waitForState(t, "the old set, no longer current", "rolling", func(s fleet.State) bool {
		return len(s.Rollout.Sets) == 1 && !s.Rollout.Sets[0].Current
	})
	assert.False(t, s.Rollout.Complete)

	v2 := e.FleetTemplate(ns, "rolling")
	e.CreateGameServerSet(ns, "rolling", "rolling-v2", v2, 1)
	e.SetGameServerSetStatus(ns, "rolling-v2", map[string]any{"replicas": int64(1), "readyReplicas": int64(1)})
	e.SetGameServerSetStatus(ns, "rolling-v1", map[string]any{"replicas": int64(2), "readyReplicas": int64(2)})
	s = rec.waitForState(t, "both sets, mid-rollout", "rolling", func(s fleet.State) bool {
		return sets(s)["rolling-v2"].ReadyReplicas == 1 && sets(s)["rolling-v1"].Replicas == 2
	})
	assert.False(t, s.Rollout.Complete)
	assert.True(t, sets(s)["rolling-v2"].Current)
	assert.False(t, sets(s)["rolling-v1"].Current)

	// The old set drained, the new one short of the desired 3: not yet.
	e.SetGameServerSetStatus(ns, "rolling-v1", map[string]any{"replicas": int64(0), "readyReplicas": int64(0)})
	e.SetGameServerSetStatus(ns, "rolling-v2", map[string]any{"replicas": int64(2), "readyReplicas": int64(2)})
	s = rec.waitForState(t, "old set empty, new one short", "rolling", func(s fleet.State) bool {
		return sets(s)["rolling-v1"].Replicas == 0 && sets(s)["rolling-v2"].Replicas == 2
	})
	assert.False(t, s.Rollout.Complete)

	// All three running the new template (one allocated): complete.
	e.SetGameServerSetStatus(ns, "rolling-v2", map[string]any{"replicas": int64(3), "readyReplicas": int64(2), "allocatedReplicas": int64(1)})
	s = rec.waitForState(t, "the rollout, complete", "rolling", func(s fleet.State) bool { return s.Rollout.Complete })
	assert.Equal(t, int64(1), sets(s)["rolling-v2"].AllocatedReplicas)

	// Agones deletes the emptied set.
	require.NoError(t, e.GameServerSets(ns).Delete(t.Context(), "rolling-v1", metav1.DeleteOptions{}))
	s = rec.waitForState(t, "the old set gone", "rolling", func(s fleet.State) bool { return len(s.Rollout.Sets) == 1 })
	assert.True(t, s.Rollout.Complete)
}

// TestAutoscalerState attaches FleetAutoscalers to the fleet they target:
// policy, sync interval and status; several on one fleet are all listed,
// and one targeting no published fleet is counted and logged.
func TestAutoscalerState(t *testing.T) {
	e := newNamespace(t)
	ns := e.Name
	rec := newRecorder()
	reg := prometheus.NewRegistry()
	kubetest.StartPublisher(t, kubetest.Config("autoscale", ns), cp.RESTConfig(), rec, func(d *publisher.Deps) { d.Registry = reg })

	e.CreateFleet(ns, "scaled", nil)
	e.CreateFleetAutoscaler(ns, "buffer", "scaled", map[string]any{
		"type": "Buffer", "buffer": map[string]any{"bufferSize": "20%", "minReplicas": int64(2), "maxReplicas": int64(40)},
	}, 30)
	scaledAt := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	e.SetFleetAutoscalerStatus(ns, "buffer", map[string]any{
		"currentReplicas": int64(3), "desiredReplicas": int64(5), "ableToScale": true, "scalingLimited": false,
		"lastScaleTime": scaledAt.Format(time.RFC3339),
	})
	s := rec.waitForState(t, "the autoscaler's status", "scaled", func(s fleet.State) bool {
		return len(s.Autoscalers) == 1 && s.Autoscalers[0].Status.DesiredReplicas == 5
	})
	assert.Equal(t, fleet.Autoscaler{
		Name:        "buffer",
		Policy:      fleet.AutoscalerPolicy{Type: "Buffer", BufferSize: "20%", MinReplicas: 2, MaxReplicas: 40},
		SyncSeconds: 30,
		Status:      fleet.AutoscalerStatus{CurrentReplicas: 3, DesiredReplicas: 5, AbleToScale: true, LastScaleTime: fleet.MicrosOf(scaledAt)},
	}, s.Autoscalers[0])

	// A second autoscaler on the same fleet: a misconfiguration, shown.
	e.CreateFleetAutoscaler(ns, "webhook", "scaled", map[string]any{
		"type": "Webhook", "webhook": map[string]any{"url": "https://scaler.example.com:8443/scale?token=secret"},
	}, 10)
	s = rec.waitForState(t, "both autoscalers", "scaled", func(s fleet.State) bool { return len(s.Autoscalers) == 2 })
	assert.Equal(t, "buffer", s.Autoscalers[0].Name)
	assert.Equal(t, fleet.AutoscalerPolicy{Type: "Webhook", WebhookHost: "scaler.example.com:8443"}, s.Autoscalers[1].Policy,
		"the host alone: the URL's query may hold a secret")
	waitGauge(t, reg, "fleetcast_publisher_shared_autoscaler_fleets", 1)

	// Counter policies, and an autoscaler whose fleet does not exist.
	e.CreateFleetAutoscaler(ns, "rooms", "missing", map[string]any{
		"type": "Counter", "counter": map[string]any{"key": "rooms", "bufferSize": int64(5), "minCapacity": int64(10), "maxCapacity": int64(100)},
	}, 30)
	waitGauge(t, reg, "fleetcast_publisher_orphan_autoscalers", 1)
	e.CreateFleet(ns, "missing", nil)
	s = rec.waitForState(t, "the counter autoscaler, once its fleet exists", "missing", func(s fleet.State) bool { return len(s.Autoscalers) == 1 })
	assert.Equal(t, fleet.AutoscalerPolicy{Type: "Counter", Key: "rooms", BufferSize: "5", MinCapacity: 10, MaxCapacity: 100}, s.Autoscalers[0].Policy)
	waitGauge(t, reg, "fleetcast_publisher_orphan_autoscalers", 0)

	// Retargeted, an autoscaler leaves its old fleet for the new one.
	_, err := e.FleetAutoscalers(ns).Patch(t.Context(), "webhook", types.MergePatchType, []byte(`{"spec":{"fleetName":"missing"}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	rec.waitForState(t, "one autoscaler left", "scaled", func(s fleet.State) bool { return len(s.Autoscalers) == 1 })
	rec.waitForState(t, "the retargeted one arrived", "missing", func(s fleet.State) bool { return len(s.Autoscalers) == 2 })

	// Deleted, it is gone from its fleet.
	require.NoError(t, e.FleetAutoscalers(ns).Delete(t.Context(), "webhook", metav1.DeleteOptions{}))
	rec.waitForState(t, "the deleted autoscaler gone", "missing", func(s fleet.State) bool { return len(s.Autoscalers) == 1 })
}

// waitGauge waits until the registry's gauge has the value.
func waitGauge(tb testing.TB, reg *prometheus.Registry, name string, want float64) {
	tb.Helper()
	require.Eventually(tb, func() bool {
		families, err := reg.Gather()
		if err != nil {
			return false
		}
		for _, f := range families {
			if f.GetName() == name && len(f.GetMetric()) == 1 {
				return f.GetMetric()[0].GetGauge().GetValue() == want
			}
		}
		return false
	}, waitTime, 20*time.Millisecond, "%s = %v", name, want)
}
