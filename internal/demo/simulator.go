package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/fleetcast/fleetcast/publisher"
)

// simFleet is one simulated Fleet and the status the simulator reports:
// its GameServerSets (the last one current; an older one while a rolling
// update moves game servers to the new template) and its FleetAutoscaler.
type simFleet struct {
	name, platform, version string
	replicas, allocated     int64
	roomsPerServer          int64
	draining                bool
	template                int64 // the game server template's revision
	sets                    []*simSet
	scaledAt                time.Time
}

// simSet is one GameServerSet of a fleet: how many of the fleet's game
// servers it runs, allocated ones among them.
type simSet struct {
	name                string
	replicas, allocated int64
}

// template is the fleet's game server template at revision rev.
func template(rev int64) map[string]any {
	return map[string]any{"spec": map[string]any{"ports": []any{map[string]any{"containerPort": 7653 + rev}}}}
}

// simulator plays the Agones controllers of one cluster: it creates Fleets
// with their GameServerSets and FleetAutoscalers, then keeps changing their
// status through the status subresource, rolls out a new game version (a
// new fleet, the old one drained and deleted), rolls a fleet's game server
// template over to a new GameServerSet, and deletes a fleet now and then.
type simulator struct {
	dyn     dynamic.Interface
	ns      string
	region  string
	rng     *rand.Rand
	fleets  []*simFleet
	rollout bool
	logf    func(format string, args ...any)
}

func (s *simulator) resource() dynamic.ResourceInterface {
	return s.dyn.Resource(publisher.FleetGVR).Namespace(s.ns)
}

func (s *simulator) create(ctx context.Context, f *simFleet) error {
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "agones.dev/v1",
		"kind":       "Fleet",
		"metadata": map[string]any{
			"name":      f.name,
			"namespace": s.ns,
			"labels":    map[string]any{"platform": f.platform, "version": f.version, "region": s.region},
		},
		"spec": map[string]any{
			"replicas": f.replicas, "scheduling": "Packed",
			"strategy": map[string]any{"type": "RollingUpdate"},
			"template": template(1),
		},
	}}
	created, err := s.resource().Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create fleet %s/%s: %w", s.ns, f.name, err)
	}
	f.template = 1
	if err := s.createSet(ctx, f, created.GetUID(), f.replicas); err != nil {
		return err
	}
	scaler := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "autoscaling.agones.dev/v1",
		"kind":       "FleetAutoscaler",
		"metadata":   map[string]any{"name": f.name, "namespace": s.ns},
		"spec": map[string]any{
			"fleetName": f.name,
			"policy":    map[string]any{"type": "Buffer", "buffer": map[string]any{"bufferSize": int64(2), "minReplicas": int64(1), "maxReplicas": int64(20)}},
			"sync":      map[string]any{"type": "FixedInterval", "fixedInterval": map[string]any{"seconds": int64(30)}},
		},
	}}
	if _, err := s.dyn.Resource(publisher.FleetAutoscalerGVR).Namespace(s.ns).Create(ctx, scaler, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create fleetautoscaler %s/%s: %w", s.ns, f.name, err)
	}
	s.fleets = append(s.fleets, f)
	if err := s.reportScaler(ctx, f); err != nil {
		return err
	}
	return s.report(ctx, f)
}

// createSet creates the GameServerSet of the fleet's current template, as
// Agones' fleet controller does: owned by the fleet, with its template.
func (s *simulator) createSet(ctx context.Context, f *simFleet, uid types.UID, replicas int64) error {
	set := &simSet{name: fmt.Sprintf("%s-t%d", f.name, f.template), replicas: replicas}
	controller := true
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "agones.dev/v1",
		"kind":       "GameServerSet",
		"metadata":   map[string]any{"name": set.name, "namespace": s.ns, "labels": map[string]any{"agones.dev/fleet": f.name}},
		"spec":       map[string]any{"replicas": replicas, "scheduling": "Packed", "template": template(f.template)},
	}}
	obj.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "agones.dev/v1", Kind: "Fleet", Name: f.name, UID: uid, Controller: &controller}})
	if _, err := s.sets().Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create gameserverset %s/%s: %w", s.ns, set.name, err)
	}
	f.sets = append(f.sets, set)
	return nil
}

func (s *simulator) sets() dynamic.ResourceInterface {
	return s.dyn.Resource(publisher.GameServerSetGVR).Namespace(s.ns)
}

// status merge-patches an object's status subresource.
func status(ctx context.Context, r dynamic.ResourceInterface, name string, st map[string]any) error {
	b, _ := json.Marshal(map[string]any{"status": st})
	_, err := r.Patch(ctx, name, types.MergePatchType, b, metav1.PatchOptions{}, "status")
	return err
}

// report writes the fleet's status as the Agones controller would.
func (s *simulator) report(ctx context.Context, f *simFleet) error {
	ready := f.replicas - f.allocated
	status := map[string]any{"status": map[string]any{
		"replicas": f.replicas, "readyReplicas": ready, "allocatedReplicas": f.allocated, "reservedReplicas": int64(0),
		"counters": map[string]any{"rooms": map[string]any{
			"count": f.allocated * f.roomsPerServer, "capacity": f.replicas * f.roomsPerServer,
			"allocatedCount": f.allocated * f.roomsPerServer, "allocatedCapacity": f.allocated * f.roomsPerServer,
		}},
	}}
	b, _ := json.Marshal(status)
	if _, err := s.resource().Patch(ctx, f.name, types.MergePatchType, b, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("report status of %s/%s: %w", s.ns, f.name, err)
	}
	return s.reportSets(ctx, f)
}

// reportSets writes each set's status: the current set runs what the old
// ones do not, allocated servers staying where they are until they end.
func (s *simulator) reportSets(ctx context.Context, f *simFleet) error {
	old := int64(0)
	for _, set := range f.sets[:len(f.sets)-1] {
		set.allocated = min(set.allocated, set.replicas)
		old += set.replicas
	}
	cur := f.sets[len(f.sets)-1]
	cur.replicas = max(0, f.replicas-old)
	cur.allocated = min(cur.replicas, max(0, f.allocated-min(old, f.allocated)))
	for _, set := range f.sets {
		if err := status(ctx, s.sets(), set.name, map[string]any{
			"replicas": set.replicas, "readyReplicas": set.replicas - set.allocated, "allocatedReplicas": set.allocated, "reservedReplicas": int64(0),
		}); err != nil {
			return fmt.Errorf("report status of gameserverset %s/%s: %w", s.ns, set.name, err)
		}
	}
	return nil
}

// reportScaler writes the autoscaler's status, as Agones' autoscaler does
// when it sets the fleet's replicas.
func (s *simulator) reportScaler(ctx context.Context, f *simFleet) error {
	st := map[string]any{"currentReplicas": f.replicas, "desiredReplicas": f.replicas, "ableToScale": true, "scalingLimited": f.replicas >= 20}
	if !f.scaledAt.IsZero() {
		st["lastScaleTime"] = f.scaledAt.UTC().Format(time.RFC3339)
	}
	if err := status(ctx, s.dyn.Resource(publisher.FleetAutoscalerGVR).Namespace(s.ns), f.name, st); err != nil {
		return fmt.Errorf("report status of fleetautoscaler %s/%s: %w", s.ns, f.name, err)
	}
	return nil
}

// rollOut changes the fleet's template: Agones creates a set for it, and
// the old one hands its game servers over step by step.
func (s *simulator) rollOut(ctx context.Context, f *simFleet) error {
	f.template++
	b, _ := json.Marshal(map[string]any{"spec": map[string]any{"template": template(f.template)}})
	updated, err := s.resource().Patch(ctx, f.name, types.MergePatchType, b, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("roll out %s/%s: %w", s.ns, f.name, err)
	}
	if err := s.createSet(ctx, f, updated.GetUID(), 0); err != nil {
		return err
	}
	s.logf("%s: rolling update of %s to template %d", s.ns, f.name, f.template)
	return s.report(ctx, f)
}

// rollStep moves one game server of the oldest set to the current one;
// an emptied set is deleted, as Agones does.
func (s *simulator) rollStep(ctx context.Context, f *simFleet) error {
	oldest := f.sets[0]
	if oldest.replicas > 0 {
		oldest.replicas--
		return s.report(ctx, f)
	}
	if err := s.sets().Delete(ctx, oldest.name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("delete gameserverset %s/%s: %w", s.ns, oldest.name, err)
	}
	f.sets = f.sets[1:]
	return s.report(ctx, f)
}

func (s *simulator) scale(ctx context.Context, f *simFleet, replicas int64) error {
	f.replicas = replicas
	f.allocated = min(f.allocated, replicas)
	f.scaledAt = time.Now()
	b, _ := json.Marshal(map[string]any{"spec": map[string]any{"replicas": replicas}})
	if _, err := s.resource().Patch(ctx, f.name, types.MergePatchType, b, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("scale %s/%s: %w", s.ns, f.name, err)
	}
	if err := s.reportScaler(ctx, f); err != nil {
		return err
	}
	return s.report(ctx, f)
}

func (s *simulator) remove(ctx context.Context, i int) error {
	f := s.fleets[i]
	if err := s.resource().Delete(ctx, f.name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("delete %s/%s: %w", s.ns, f.name, err)
	}
	// No garbage collector runs beside the demo's API server: the
	// simulator deletes what Kubernetes would through owner references,
	// and the autoscaler, as an operator would with its fleet.
	for _, set := range f.sets {
		if err := s.sets().Delete(ctx, set.name, metav1.DeleteOptions{}); err != nil {
			return fmt.Errorf("delete gameserverset %s/%s: %w", s.ns, set.name, err)
		}
	}
	if err := s.dyn.Resource(publisher.FleetAutoscalerGVR).Namespace(s.ns).Delete(ctx, f.name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("delete fleetautoscaler %s/%s: %w", s.ns, f.name, err)
	}
	s.fleets = append(s.fleets[:i], s.fleets[i+1:]...)
	s.logf("%s: deleted fleet %s", s.ns, f.name)
	return nil
}

// start creates the initial fleets: one per platform at version 1.42.
func (s *simulator) start(ctx context.Context) error {
	for _, p := range []string{"pc", "ps5", "xbox"} {
		f := &simFleet{name: p + "-v1-42", platform: p, version: "1.42", replicas: int64(4 + s.rng.IntN(6)), roomsPerServer: 4}
		if err := s.create(ctx, f); err != nil {
			return err
		}
	}
	return nil
}

// step makes one change, as game sessions come and go.
func (s *simulator) step(ctx context.Context, tick int) error {
	if len(s.fleets) == 0 {
		return nil
	}
	switch {
	case tick == 20 && !s.rollout:
		// Roll out 1.43 on pc: a new fleet, the old one drains.
		s.rollout = true
		for _, f := range s.fleets {
			if f.platform == "pc" && f.version == "1.42" {
				f.draining = true
			}
		}
		s.logf("%s: rolling out pc 1.43", s.ns)
		return s.create(ctx, &simFleet{name: "pc-v1-43", platform: "pc", version: "1.43", replicas: 2, roomsPerServer: 4})
	case tick == 12:
		// A rolling update of the ps5 fleet's game server template.
		for _, f := range s.fleets {
			if f.platform == "ps5" {
				return s.rollOut(ctx, f)
			}
		}
	case tick == 45:
		// A limited-time mode ends: its fleet is deleted.
		for i, f := range s.fleets {
			if f.platform == "xbox" {
				return s.remove(ctx, i)
			}
		}
	}
	i := s.rng.IntN(len(s.fleets))
	f := s.fleets[i]
	switch {
	case len(f.sets) > 1 && s.rng.IntN(2) == 0:
		return s.rollStep(ctx, f)
	case f.draining:
		if f.replicas == 0 {
			return s.remove(ctx, i)
		}
		return s.scale(ctx, f, f.replicas-1)
	case s.rng.IntN(5) == 0:
		// The fleet autoscaler reacts to demand.
		return s.scale(ctx, f, max(1, f.replicas+int64(s.rng.IntN(5))-2))
	default:
		// Allocations come and go.
		f.allocated = max(0, min(f.replicas, f.allocated+int64(s.rng.IntN(3))-1))
		return s.report(ctx, f)
	}
}

// run creates the fleets and changes them every interval until ctx ends.
func (s *simulator) run(ctx context.Context, interval time.Duration) error {
	if err := s.start(ctx); err != nil {
		return err
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for tick := 1; ; tick++ {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		// Each step has its own deadline: near the run's end, the
		// client's rate limiter would refuse a call that might outlast
		// the run's deadline, which is no failure of the step.
		stepCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		err := s.step(stepCtx, tick)
		cancel()
		if err != nil && ctx.Err() == nil {
			return err
		}
	}
}
