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

// simFleet is one simulated Fleet and the status the simulator reports.
type simFleet struct {
	name, platform, version string
	replicas, allocated     int64
	roomsPerServer          int64
	draining                bool
}

// simulator plays the Agones controller of one cluster: it creates Fleets,
// then keeps changing their status through the status subresource, rolls
// out a new game version (a new fleet, the old one drained and deleted),
// and deletes a fleet now and then.
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
			"template": map[string]any{"spec": map[string]any{"ports": []any{map[string]any{"containerPort": int64(7654)}}}},
		},
	}}
	if _, err := s.resource().Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create fleet %s/%s: %w", s.ns, f.name, err)
	}
	s.fleets = append(s.fleets, f)
	return s.report(ctx, f)
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
	return nil
}

func (s *simulator) scale(ctx context.Context, f *simFleet, replicas int64) error {
	f.replicas = replicas
	f.allocated = min(f.allocated, replicas)
	b, _ := json.Marshal(map[string]any{"spec": map[string]any{"replicas": replicas}})
	if _, err := s.resource().Patch(ctx, f.name, types.MergePatchType, b, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("scale %s/%s: %w", s.ns, f.name, err)
	}
	return s.report(ctx, f)
}

func (s *simulator) remove(ctx context.Context, i int) error {
	f := s.fleets[i]
	if err := s.resource().Delete(ctx, f.name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("delete %s/%s: %w", s.ns, f.name, err)
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
		if err := s.step(ctx, tick); err != nil && ctx.Err() == nil {
			return err
		}
	}
}
