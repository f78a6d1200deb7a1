package fleet

import (
	"fmt"
	"slices"
	"strings"
)

// Rollout is the progress of a fleet's rollout over its GameServerSets:
// Agones keeps one set per game server template, scales the current one up
// and the others down. Added after schemaVersion 1's first release, with a
// default: older publishers omit it, and no sets means it is unknown.
type Rollout struct {
	// Complete: the current set is the only one with game servers, and it
	// runs all of the fleet's desired replicas (ready, reserved or
	// allocated: all run the current template).
	Complete bool `json:"complete" firestore:"complete"`
	// Sets are the fleet's GameServerSets, sorted by name.
	Sets []GameServerSet `json:"sets" firestore:"sets"`
}

// GameServerSet is one of a fleet's GameServerSets.
type GameServerSet struct {
	Name string `json:"name" firestore:"name"`
	// Current: its template is the fleet's, as Agones decides which set a
	// rolling update scales up.
	Current           bool  `json:"current" firestore:"current"`
	Replicas          int64 `json:"replicas" firestore:"replicas"`
	ReadyReplicas     int64 `json:"readyReplicas" firestore:"readyReplicas"`
	AllocatedReplicas int64 `json:"allocatedReplicas" firestore:"allocatedReplicas"`
	ReservedReplicas  int64 `json:"reservedReplicas" firestore:"reservedReplicas"`
}

// Known reports whether the publisher saw any of the fleet's sets.
func (r Rollout) Known() bool { return len(r.Sets) > 0 }

// RolloutOf computes a fleet's rollout from its sets and desired replicas.
func RolloutOf(desired int64, sets []GameServerSet) Rollout {
	sets = slices.Clone(sets)
	slices.SortFunc(sets, func(a, b GameServerSet) int { return strings.Compare(a.Name, b.Name) })
	r := Rollout{Sets: sets}
	current := 0
	var running int64
	for _, s := range sets {
		if s.Current {
			current++
			running = SatAdd(SatAdd(s.ReadyReplicas, s.ReservedReplicas), s.AllocatedReplicas)
		} else if s.Replicas > 0 {
			return r
		}
	}
	r.Complete = current == 1 && running >= desired
	return r
}

// Autoscaler is a FleetAutoscaler targeting a fleet: its policy and what it
// last did. Added after schemaVersion 1's first release, with a default.
type Autoscaler struct {
	Name   string           `json:"name" firestore:"name"`
	Policy AutoscalerPolicy `json:"policy" firestore:"policy"`
	// SyncSeconds is spec.sync.fixedInterval.seconds; 0 when unset (Agones
	// defaults it to 30).
	SyncSeconds int64            `json:"syncSeconds" firestore:"syncSeconds"`
	Status      AutoscalerStatus `json:"status" firestore:"status"`
}

// AutoscalerPolicy is a FleetAutoscaler's policy, flattened: the fields a
// type does not use are empty.
type AutoscalerPolicy struct {
	// Type is Buffer, Webhook, Counter, List, Wasm, Schedule or Chain.
	Type string `json:"type" firestore:"type"`
	// BufferSize is an absolute number or a percentage ("20%") (Buffer,
	// Counter, List).
	BufferSize string `json:"bufferSize" firestore:"bufferSize"`
	// MinReplicas and MaxReplicas bound a Buffer policy.
	MinReplicas int64 `json:"minReplicas" firestore:"minReplicas"`
	MaxReplicas int64 `json:"maxReplicas" firestore:"maxReplicas"`
	// Key, MinCapacity and MaxCapacity are a Counter or List policy's.
	Key         string `json:"key" firestore:"key"`
	MinCapacity int64  `json:"minCapacity" firestore:"minCapacity"`
	MaxCapacity int64  `json:"maxCapacity" firestore:"maxCapacity"`
	// WebhookHost is the host a Webhook policy calls: the URL's host, or
	// service.namespace for an in-cluster service; never the path or the
	// query, which may carry secrets.
	WebhookHost string `json:"webhookHost" firestore:"webhookHost"`
}

// AutoscalerStatus is what a FleetAutoscaler last reported.
type AutoscalerStatus struct {
	CurrentReplicas int64 `json:"currentReplicas" firestore:"currentReplicas"`
	DesiredReplicas int64 `json:"desiredReplicas" firestore:"desiredReplicas"`
	AbleToScale     bool  `json:"ableToScale" firestore:"ableToScale"`
	ScalingLimited  bool  `json:"scalingLimited" firestore:"scalingLimited"`
	// LastScaleTime is when it last scaled; 0 when never.
	LastScaleTime Micros `json:"lastScaleTime" firestore:"lastScaleTime"`
}

// Limits on the rollout and autoscalers an event may carry. Agones deletes
// a rolling update's emptied sets, and one autoscaler per fleet is the
// rule; these leave room for what goes wrong, and are reported, not hidden.
const (
	MaxRolloutSets = 64
	MaxAutoscalers = 16
	maxPolicyText  = 253
)

// policyTypes are the FleetAutoscaler policy types of Agones' CRD.
var policyTypes = []string{"Buffer", "Webhook", "Counter", "List", "Wasm", "Schedule", "Chain"}

func (r Rollout) validate() error {
	if len(r.Sets) > MaxRolloutSets {
		return fmt.Errorf("%w: fleet.rollout.sets: %d entries, at most %d", ErrInvalid, len(r.Sets), MaxRolloutSets)
	}
	current := 0
	for i, s := range r.Sets {
		field := fmt.Sprintf("fleet.rollout.sets[%d]", i)
		if err := validateObjectName(field+".name", s.Name); err != nil {
			return err
		}
		if i > 0 && r.Sets[i-1].Name >= s.Name {
			return fmt.Errorf("%w: %s.name %q: sets must be sorted by name, without duplicates", ErrInvalid, field, s.Name)
		}
		if s.Replicas < 0 || s.ReadyReplicas < 0 || s.AllocatedReplicas < 0 || s.ReservedReplicas < 0 {
			return fmt.Errorf("%w: %s: replica counts must not be negative", ErrInvalid, field)
		}
		if s.Current {
			current++
		}
	}
	if r.Complete && current != 1 {
		return fmt.Errorf("%w: fleet.rollout.complete: true needs exactly one current set, not %d", ErrInvalid, current)
	}
	return nil
}

func validateAutoscalers(as []Autoscaler) error {
	if len(as) > MaxAutoscalers {
		return fmt.Errorf("%w: fleet.autoscalers: %d entries, at most %d", ErrInvalid, len(as), MaxAutoscalers)
	}
	for i, a := range as {
		field := fmt.Sprintf("fleet.autoscalers[%d]", i)
		if err := validateObjectName(field+".name", a.Name); err != nil {
			return err
		}
		if i > 0 && as[i-1].Name >= a.Name {
			return fmt.Errorf("%w: %s.name %q: autoscalers must be sorted by name, without duplicates", ErrInvalid, field, a.Name)
		}
		p := a.Policy
		if p.Type != "" && !slices.Contains(policyTypes, p.Type) {
			return fmt.Errorf("%w: %s.policy.type %q: must be one of %v", ErrInvalid, field, p.Type, policyTypes)
		}
		for _, s := range []string{p.BufferSize, p.Key, p.WebhookHost} {
			if len(s) > maxPolicyText || !printable(s) {
				return fmt.Errorf("%w: %s.policy: texts must be at most %d printable characters", ErrInvalid, field, maxPolicyText)
			}
		}
		st := a.Status
		if a.SyncSeconds < 0 || p.MinReplicas < 0 || p.MaxReplicas < 0 || p.MinCapacity < 0 || p.MaxCapacity < 0 ||
			st.CurrentReplicas < 0 || st.DesiredReplicas < 0 || st.LastScaleTime < 0 {
			return fmt.Errorf("%w: %s: numbers must not be negative", ErrInvalid, field)
		}
		if st.LastScaleTime > MaxMicros {
			return fmt.Errorf("%w: %s.status.lastScaleTime %d: after year 9999", ErrInvalid, field, st.LastScaleTime)
		}
	}
	return nil
}

// validateObjectName accepts a Kubernetes object name (a DNS-1123
// subdomain).
func validateObjectName(field, name string) error {
	if err := validateDNSSubdomain(name); err != nil {
		return fmt.Errorf("%w: %s %q: %v", ErrInvalid, field, name, err)
	}
	return nil
}
