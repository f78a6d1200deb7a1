package publisher

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetcast/fleetcast/fleet"
)

// FleetGVR is the Agones Fleet resource.
var FleetGVR = schema.GroupVersionResource{Group: "agones.dev", Version: "v1", Resource: "fleets"}

// Projection says which metadata of a Fleet is copied into its events.
// Patterns are exact keys, or prefixes when they end in "*".
type Projection struct {
	// ExcludeLabels are labels never copied (e.g. ones that change often
	// and matter to nobody downstream).
	ExcludeLabels []string
	// IncludeAnnotations are the only annotations copied.
	IncludeAnnotations []string
}

// Project reads the fleet key and state out of a Fleet object. It reads
// only, never modifying obj (an informer cache object), tolerates missing
// fields (nothing defaults them without the Agones controller) and ignores
// unknown ones (newer Agones versions add status fields). A field of the
// wrong type is an error: publishing a guess would be worse than waiting for
// the next update.
func (p Projection) Project(cluster string, obj *unstructured.Unstructured) (fleet.Key, fleet.State, error) {
	k := fleet.Key{Cluster: cluster, Namespace: obj.GetNamespace(), Name: obj.GetName()}
	r := reader{obj: obj.Object}
	s := fleet.State{
		UID:         string(obj.GetUID()),
		Labels:      filterKeys(obj.GetLabels(), p.ExcludeLabels, false),
		Annotations: filterKeys(obj.GetAnnotations(), p.IncludeAnnotations, true),
		Spec: fleet.Spec{
			Replicas:     r.int("spec", "replicas"),
			Scheduling:   r.string("spec", "scheduling"),
			StrategyType: r.string("spec", "strategy", "type"),
		},
		Status: fleet.Status{
			Replicas:          r.int("status", "replicas"),
			ReadyReplicas:     r.int("status", "readyReplicas"),
			ReservedReplicas:  r.int("status", "reservedReplicas"),
			AllocatedReplicas: r.int("status", "allocatedReplicas"),
			Allocations:       r.int("status", "allocations"),
			Players: fleet.Players{
				Count:    r.int("status", "players", "count"),
				Capacity: r.int("status", "players", "capacity"),
			},
			Counters: r.aggregates("status", "counters"),
			Lists:    r.aggregates("status", "lists"),
		},
		GameServerLabels: r.stringMap("spec", "template", "metadata", "labels"),
	}
	if r.err != nil {
		return k, fleet.State{}, fmt.Errorf("project fleet %s: %w", k, r.err)
	}
	return k, s, nil
}

// filterKeys copies m keeping the keys that match patterns (include) or do
// not (exclude). It returns nil for an empty result.
func filterKeys(m map[string]string, patterns []string, include bool) map[string]string {
	var out map[string]string
	for k, v := range m {
		if matchAny(k, patterns) != include {
			continue
		}
		if out == nil {
			out = make(map[string]string, len(m))
		}
		out[k] = v
	}
	return out
}

func matchAny(key string, patterns []string) bool {
	for _, p := range patterns {
		if prefix, ok := strings.CutSuffix(p, "*"); ok {
			if strings.HasPrefix(key, prefix) {
				return true
			}
		} else if key == p {
			return true
		}
	}
	return false
}

// reader reads nested fields of an unstructured object, remembering the
// first type error.
type reader struct {
	obj map[string]any
	err error
}

func (r *reader) get(path ...string) (any, bool) {
	var cur any = r.obj
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			if cur != nil {
				r.fail(path, "an object", cur)
			}
			return nil, false
		}
		cur, ok = m[p]
		if !ok || cur == nil {
			return nil, false
		}
	}
	return cur, true
}

func (r *reader) fail(path []string, want string, got any) {
	if r.err == nil {
		r.err = fmt.Errorf("%s: want %s, got %T", strings.Join(path, "."), want, got)
	}
}

func (r *reader) int(path ...string) int64 {
	v, ok := r.get(path...)
	if !ok {
		return 0
	}
	switch n := v.(type) {
	case int64:
		return n
	case int:
		return int64(n)
	case int32:
		return int64(n)
	case float64:
		if n == math.Trunc(n) && math.Abs(n) < 1<<53 {
			return int64(n)
		}
	}
	r.fail(path, "an integer", v)
	return 0
}

func (r *reader) string(path ...string) string {
	v, ok := r.get(path...)
	if !ok {
		return ""
	}
	s, isString := v.(string)
	if !isString {
		r.fail(path, "a string", v)
	}
	return s
}

func (r *reader) aggregates(path ...string) map[string]fleet.Aggregate {
	v, ok := r.get(path...)
	if !ok {
		return nil
	}
	m, isMap := v.(map[string]any)
	if !isMap {
		r.fail(path, "an object", v)
		return nil
	}
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]fleet.Aggregate, len(m))
	for _, key := range sortedKeys(m) {
		sub := reader{obj: map[string]any{key: m[key]}}
		out[key] = fleet.Aggregate{
			Count:             sub.int(key, "count"),
			Capacity:          sub.int(key, "capacity"),
			AllocatedCount:    sub.int(key, "allocatedCount"),
			AllocatedCapacity: sub.int(key, "allocatedCapacity"),
		}
		if sub.err != nil && r.err == nil {
			r.err = fmt.Errorf("%s.%w", strings.Join(path, "."), sub.err)
		}
	}
	return out
}

// stringMap reads an object of strings, such as labels; nil when absent
// or empty.
func (r *reader) stringMap(path ...string) map[string]string {
	v, ok := r.get(path...)
	if !ok {
		return nil
	}
	m, isMap := v.(map[string]any)
	if !isMap {
		r.fail(path, "an object", v)
		return nil
	}
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for _, k := range sortedKeys(m) {
		s, isString := m[k].(string)
		if !isString {
			r.fail(append(path, k), "a string", m[k])
			return nil
		}
		out[k] = s
	}
	return out
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range maps.Keys(m) {
		keys = append(keys, k)
	}
	// Sorted for a deterministic first error.
	slices.Sort(keys)
	return keys
}

func (r *reader) bool(path ...string) bool {
	v, ok := r.get(path...)
	if !ok {
		return false
	}
	b, isBool := v.(bool)
	if !isBool {
		r.fail(path, "a boolean", v)
	}
	return b
}

// intOrString reads a Kubernetes IntOrString ("5" or "20%") as text.
func (r *reader) intOrString(path ...string) string {
	v, ok := r.get(path...)
	if !ok {
		return ""
	}
	if s, isString := v.(string); isString {
		return s
	}
	n := r.int(path...)
	if r.err != nil {
		return ""
	}
	return strconv.FormatInt(n, 10)
}
