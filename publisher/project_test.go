package publisher

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/fleetcast/fleetcast/fleet"
)

func fleetObject(tb testing.TB, y string) *unstructured.Unstructured {
	tb.Helper()
	var m map[string]any
	require.NoError(tb, yaml.Unmarshal([]byte(y), &m))
	return &unstructured.Unstructured{Object: m}
}

const fullFleet = `
apiVersion: agones.dev/v1
kind: Fleet
metadata:
  name: simple-game-server
  namespace: default
  uid: 6f1f5e0e-1111-2222-3333-444455556666
  resourceVersion: "12345"
  labels:
    app.kubernetes.io/version: "1.42.0"
    platform: pc
    pod-template-hash: abc123
    noisy.example.com/last-scaled: "17"
  annotations:
    fleetcast.dev/pool: ranked
    kubectl.kubernetes.io/last-applied-configuration: "{...}"
  managedFields:
  - manager: kubectl
spec:
  replicas: 10
  scheduling: Packed
  strategy:
    type: RollingUpdate
    rollingUpdate: {maxSurge: 25%}
  template:
    metadata:
      labels: {mode: ranked, app.kubernetes.io/version: "1.42.0"}
    spec: {}
status:
  replicas: 10
  readyReplicas: 7
  reservedReplicas: 1
  allocatedReplicas: 2
  allocations: 15
  players: {count: 12, capacity: 100}
  counters:
    rooms: {count: 14, capacity: 40, allocatedCount: 9, allocatedCapacity: 8}
  lists:
    players: {count: 12, capacity: 100}
  someFieldFromAFutureAgones: {x: 1}
`

func TestProject(t *testing.T) {
	p := Projection{ExcludeLabels: []string{"pod-template-hash", "noisy.example.com/*"}, IncludeAnnotations: []string{"fleetcast.dev/*"}}
	obj := fleetObject(t, fullFleet)
	before := obj.DeepCopy()
	k, s, err := p.Project("pc", obj)
	require.NoError(t, err)
	assert.Equal(t, before, obj, "the informer's object is never modified")
	assert.Equal(t, fleet.Key{Cluster: "pc", Namespace: "default", Name: "simple-game-server"}, k)
	assert.Equal(t, fleet.State{
		UID:         "6f1f5e0e-1111-2222-3333-444455556666",
		Labels:      map[string]string{"app.kubernetes.io/version": "1.42.0", "platform": "pc"},
		Annotations: map[string]string{"fleetcast.dev/pool": "ranked"},
		Spec:        fleet.Spec{Replicas: 10, Scheduling: "Packed", StrategyType: "RollingUpdate"},
		Status: fleet.Status{
			Replicas: 10, ReadyReplicas: 7, ReservedReplicas: 1, AllocatedReplicas: 2, Allocations: 15,
			Players:  fleet.Players{Count: 12, Capacity: 100},
			Counters: map[string]fleet.Aggregate{"rooms": {Count: 14, Capacity: 40, AllocatedCount: 9, AllocatedCapacity: 8}},
			Lists:    map[string]fleet.Aggregate{"players": {Count: 12, Capacity: 100}},
		},
		GameServerLabels: map[string]string{"mode": "ranked", "app.kubernetes.io/version": "1.42.0"},
	}, s)
	require.NoError(t, s.Validate())

	// The projection must not alias the object's maps either.
	s.Labels["platform"] = "changed"
	assert.Equal(t, "pc", obj.GetLabels()["platform"])
}

func TestProjectToleratesMissingFields(t *testing.T) {
	// What the API server stores without the Agones controller: no status,
	// no defaults.
	obj := fleetObject(t, `
metadata: {name: bare, namespace: ns, uid: u-1}
spec: {template: {spec: {}}}
`)
	_, s, err := Projection{}.Project("pc", obj)
	require.NoError(t, err)
	assert.Equal(t, fleet.State{UID: "u-1"}, s)
	require.NoError(t, s.Validate())
}

func TestProjectRejectsWrongTypes(t *testing.T) {
	for name, y := range map[string]string{
		"status.readyReplicas": `{metadata: {name: a, namespace: b}, status: {readyReplicas: "seven"}}`,
		"spec.scheduling":      `{metadata: {name: a, namespace: b}, spec: {scheduling: 3}}`,
		"status.counters":      `{metadata: {name: a, namespace: b}, status: {counters: [1]}}`,
		"rooms.count":          `{metadata: {name: a, namespace: b}, status: {counters: {rooms: {count: 1.5}}}}`,
		"status.players":       `{metadata: {name: a, namespace: b}, status: {players: 3}}`,
		"labels.mode":          `{metadata: {name: a, namespace: b}, spec: {template: {metadata: {labels: {mode: 3}}}}}`,
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := Projection{}.Project("pc", fleetObject(t, y))
			require.Error(t, err)
			assert.Contains(t, err.Error(), name)
		})
	}
}

func TestProjectionIgnoresMetadataNoise(t *testing.T) {
	p := Projection{ExcludeLabels: []string{"pod-template-hash"}}
	a := fleetObject(t, fullFleet)
	b := a.DeepCopy()
	b.SetResourceVersion("99999")
	b.SetManagedFields(nil)
	b.SetGeneration(7)
	labels := b.GetLabels()
	labels["pod-template-hash"] = "zzz"
	b.SetLabels(labels)
	annotations := b.GetAnnotations()
	annotations["kubectl.kubernetes.io/last-applied-configuration"] = "{other}"
	b.SetAnnotations(annotations)
	_, sa, err := p.Project("pc", a)
	require.NoError(t, err)
	_, sb, err := p.Project("pc", b)
	require.NoError(t, err)
	assert.True(t, sa.Equal(sb), "resourceVersion, managedFields and excluded metadata are not state")
}
