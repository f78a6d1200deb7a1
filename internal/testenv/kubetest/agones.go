package kubetest

import (
	"encoding/json"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/fleetcast/fleetcast/publisher"
)

// GameServerSets is the GameServerSet resource of namespace ns.
func (n *Namespace) GameServerSets(ns string) dynamic.ResourceInterface {
	return n.Dyn.Resource(publisher.GameServerSetGVR).Namespace(ns)
}

// FleetAutoscalers is the FleetAutoscaler resource of namespace ns.
func (n *Namespace) FleetAutoscalers(ns string) dynamic.ResourceInterface {
	return n.Dyn.Resource(publisher.FleetAutoscalerGVR).Namespace(ns)
}

// CreateGameServerSet creates a GameServerSet of a fleet as Agones' fleet
// controller does: owned by the fleet (controller reference), labelled
// agones.dev/fleet, with the given template and replicas.
func (n *Namespace) CreateGameServerSet(ns, fleetName, name string, template map[string]any, replicas int64) {
	n.tb.Helper()
	owner, err := n.Fleets(ns).Get(n.tb.Context(), fleetName, metav1.GetOptions{})
	require.NoError(n.tb, err)
	controller := true
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "agones.dev/v1",
		"kind":       "GameServerSet",
		"metadata":   map[string]any{"name": name, "namespace": ns, "labels": map[string]any{"agones.dev/fleet": fleetName}},
		"spec":       map[string]any{"replicas": replicas, "scheduling": "Packed", "template": template},
	}}
	obj.SetOwnerReferences([]metav1.OwnerReference{{
		APIVersion: "agones.dev/v1", Kind: "Fleet", Name: fleetName, UID: owner.GetUID(), Controller: &controller,
	}})
	_, err = n.GameServerSets(ns).Create(n.tb.Context(), obj, metav1.CreateOptions{})
	require.NoError(n.tb, err)
}

// SetGameServerSetStatus merge-patches a GameServerSet's status, as Agones
// does.
func (n *Namespace) SetGameServerSetStatus(ns, name string, status map[string]any) {
	n.tb.Helper()
	patch(n, n.GameServerSets(ns), name, map[string]any{"status": status}, "status")
}

// FleetTemplate is the game server template of a fleet.
func (n *Namespace) FleetTemplate(ns, name string) map[string]any {
	n.tb.Helper()
	obj, err := n.Fleets(ns).Get(n.tb.Context(), name, metav1.GetOptions{})
	require.NoError(n.tb, err)
	tmpl, _, err := unstructured.NestedMap(obj.Object, "spec", "template")
	require.NoError(n.tb, err)
	return tmpl
}

// CreateFleetAutoscaler creates a FleetAutoscaler of fleetName with the
// given policy (Agones' spec.policy) and a fixed sync interval.
func (n *Namespace) CreateFleetAutoscaler(ns, name, fleetName string, policy map[string]any, syncSeconds int64) {
	n.tb.Helper()
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "autoscaling.agones.dev/v1",
		"kind":       "FleetAutoscaler",
		"metadata":   map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"fleetName": fleetName,
			"policy":    policy,
			"sync":      map[string]any{"type": "FixedInterval", "fixedInterval": map[string]any{"seconds": syncSeconds}},
		},
	}}
	_, err := n.FleetAutoscalers(ns).Create(n.tb.Context(), obj, metav1.CreateOptions{})
	require.NoError(n.tb, err)
}

// SetFleetAutoscalerStatus merge-patches a FleetAutoscaler's status, as
// Agones' autoscaler controller does.
func (n *Namespace) SetFleetAutoscalerStatus(ns, name string, status map[string]any) {
	n.tb.Helper()
	patch(n, n.FleetAutoscalers(ns), name, map[string]any{"status": status}, "status")
}

func patch(n *Namespace, r dynamic.ResourceInterface, name string, p map[string]any, subresource ...string) {
	n.tb.Helper()
	b, err := json.Marshal(p)
	require.NoError(n.tb, err)
	_, err = r.Patch(n.tb.Context(), name, types.MergePatchType, b, metav1.PatchOptions{}, subresource...)
	require.NoError(n.tb, err)
}
