package fleet

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// State is the compact projection of one Agones Fleet that an upsert
// carries. JSON names follow Agones' own fields.
type State struct {
	UID         string            `json:"uid"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	Spec        Spec              `json:"spec"`
	Status      Status            `json:"status"`
	// Degraded, when not empty, says what Fit dropped from the fleet's
	// state to publish it, and why. Added after schemaVersion 1's first
	// release, with a default: older publishers omit it.
	Degraded string `json:"degraded"`
	// Rollout is the progress of the fleet's rollout; Autoscalers are the
	// FleetAutoscalers targeting it, sorted by name (more than one is a
	// misconfiguration, shown as it is). Added after schemaVersion 1's
	// first release, with defaults: older publishers omit them.
	Rollout     Rollout      `json:"rollout"`
	Autoscalers []Autoscaler `json:"autoscalers"`
	// GameServerLabels are the labels the fleet's template gives each of
	// its game servers (spec.template.metadata.labels), which an
	// allocation's gameServerSelectors match; Agones adds agones.dev/fleet
	// and agones.dev/gameserverset to them. Added in revision 4 of the
	// event schema, with a default: older publishers omit them.
	GameServerLabels map[string]string `json:"gameServerLabels"`
}

// Spec is the part of a Fleet's spec that matchmakers and autoscalers use.
type Spec struct {
	Replicas int64 `json:"replicas" firestore:"replicas"`
	// Scheduling is "Packed" or "Distributed"; empty when nothing defaulted it.
	Scheduling string `json:"scheduling" firestore:"scheduling"`
	// StrategyType is "RollingUpdate" or "Recreate"; empty when unset.
	StrategyType string `json:"strategyType" firestore:"strategyType"`
}

// Status is a Fleet's status as Agones aggregates it over its game servers.
// A snapshot carries the same shape summed over a whole cluster.
type Status struct {
	Replicas          int64                `json:"replicas"`
	ReadyReplicas     int64                `json:"readyReplicas"`
	ReservedReplicas  int64                `json:"reservedReplicas"`
	AllocatedReplicas int64                `json:"allocatedReplicas"`
	Allocations       int64                `json:"allocations"`
	Players           Players              `json:"players"`
	Counters          map[string]Aggregate `json:"counters"`
	Lists             map[string]Aggregate `json:"lists"`
}

// Players is the player tracking aggregate (alpha in Agones).
type Players struct {
	Count    int64 `json:"count"`
	Capacity int64 `json:"capacity"`
}

// Aggregate is a counter or list aggregated over a fleet's game servers.
type Aggregate struct {
	Count             int64 `json:"count"`
	Capacity          int64 `json:"capacity"`
	AllocatedCount    int64 `json:"allocatedCount"`
	AllocatedCapacity int64 `json:"allocatedCapacity"`
}

// Limits on what an event may carry. Kubernetes already bounds labels; the
// others keep one fleet's document far below Firestore's 1 MiB and every
// indexed value below its 1500-byte index entry limit.
const (
	MaxLabels          = 256
	MaxAnnotations     = 64
	MaxAnnotationValue = 4096
	MaxAggregates      = 1000 // Agones' CRD: maxProperties of counters and lists
	MaxAggregateKey    = 256
	MaxUIDLen          = 128
	MaxDegradedLen     = 1024
)

// MaxStateBytes bounds a fleet's state as JSON — labels, annotations,
// counters, lists, rollout and autoscalers together — and so the document
// every query instance holds in memory for it (about 1.3 times as many
// bytes of heap; a typical fleet takes about 1 KiB). Each limit above is
// Kubernetes' or Agones' own, but together they allow 80 KiB of labels
// alone, which 10 000 fleets would make a gigabyte in every instance. A
// state past it is degraded as Fit says (an upsert of it is far below
// MaxUpsertBytes): by the publisher, and again by
// the ingest function for a publisher that did not.
const MaxStateBytes = 8 << 10

// Fit returns s as it can be published: unchanged when it is valid and
// within MaxStateBytes; otherwise reduced by dropping, in this order and
// only as far as needed, the annotations, the autoscalers, the rollout,
// the lists, the counters, the game server labels, the labels, and a
// scheduling or strategy type this version does not know — with Degraded
// saying what was dropped and the first reason. ok is false when even that does not fit (an invalid
// UID, a negative count): such a fleet cannot be published at all.
func Fit(s State) (fitted State, ok bool) {
	s.Degraded = ""
	fitted, reason, ok := reduce(s, fits)
	if ok && reason != "" {
		fitted.Degraded = degradedText(reason)
	}
	return fitted, ok
}

// Admit returns the state of a validated upsert as the ingest side stores
// it, observed by a clock that reads now: unchanged when it fits, or
// reduced as Fit reduces it, for a publisher that did not fit it (an older
// one, or one not built from this code), with Degraded saying what the
// ingest side dropped after what the publisher did. Beyond Fit's rules, a
// time in the state (an autoscaler's last scale) may not be more than
// maxSkew ahead of now, as an event's observedAt may not. When no
// reduction fits, the error (wrapping ErrInvalid) says why the state
// cannot be stored.
func Admit(s State, now time.Time, maxSkew time.Duration) (admitted State, changed bool, err error) {
	check := func(s State) error {
		if err := fits(s); err != nil {
			return err
		}
		return checkStateTimes(s, now, maxSkew)
	}
	admitted, reason, ok := reduce(s, check)
	if !ok {
		return State{}, false, check(s)
	}
	if reason == "" {
		return admitted, false, nil
	}
	reason = "at ingest, " + reason
	if s.Degraded != "" {
		reason = s.Degraded + "; " + reason
	}
	admitted.Degraded = degradedText(reason)
	return admitted, true, nil
}

// Degrade returns s with why said first in its Degraded text: a part of
// its state the publisher could not know (it cannot list the resource).
func Degrade(s State, why string) State {
	if s.Degraded != "" {
		why += "; " + s.Degraded
	}
	s.Degraded = degradedText(why)
	return s
}

// checkStateTimes reports a time in s further ahead of now than maxSkew.
func checkStateTimes(s State, now time.Time, maxSkew time.Duration) error {
	limit := MicrosOf(now.Add(maxSkew))
	for i, a := range s.Autoscalers {
		if a.Status.LastScaleTime > limit {
			return fmt.Errorf("%w: fleet.autoscalers[%d].status.lastScaleTime %s: more than %s ahead of the ingest clock",
				ErrInvalid, i, a.Status.LastScaleTime.Time().Format(time.RFC3339), maxSkew)
		}
	}
	return nil
}

// degradedText bounds a Degraded reason to MaxDegradedLen printable
// characters.
func degradedText(reason string) string {
	if len(reason) > MaxDegradedLen {
		reason = strings.ToValidUTF8(reason[:MaxDegradedLen-3], "") + "..."
	}
	return sanitize(reason)
}

// reduce drops the optional parts of s, in Fit's order and only as far as
// needed, until check accepts it, and says what it dropped and why ("" when
// s was accepted as it is).
func reduce(s State, check func(State) error) (State, string, bool) {
	first := check(s)
	if first == nil {
		return s, "", true
	}
	steps := []struct {
		what string
		has  func(State) bool
		drop func(*State)
	}{
		{"annotations", func(s State) bool { return len(s.Annotations) > 0 }, func(s *State) { s.Annotations = nil }},
		{"autoscalers", func(s State) bool { return len(s.Autoscalers) > 0 }, func(s *State) { s.Autoscalers = nil }},
		{"rollout", func(s State) bool { return s.Rollout.Known() }, func(s *State) { s.Rollout = Rollout{} }},
		{"lists", func(s State) bool { return len(s.Status.Lists) > 0 }, func(s *State) { s.Status.Lists = nil }},
		{"counters", func(s State) bool { return len(s.Status.Counters) > 0 }, func(s *State) { s.Status.Counters = nil }},
		{"game server labels", func(s State) bool { return len(s.GameServerLabels) > 0 }, func(s *State) { s.GameServerLabels = nil }},
		{"labels", func(s State) bool { return len(s.Labels) > 0 }, func(s *State) { s.Labels = nil }},
		{"spec", func(s State) bool { return s.Spec.Scheduling != "" || s.Spec.StrategyType != "" }, func(s *State) { s.Spec.Scheduling, s.Spec.StrategyType = "", "" }},
	}
	s = s.Clone()
	var dropped []string
	for _, step := range steps {
		if !step.has(s) {
			continue
		}
		step.drop(&s)
		dropped = append(dropped, step.what)
		if check(s) == nil {
			return s, fmt.Sprintf("dropped %s: %v", strings.Join(dropped, ", "), first), true
		}
	}
	return State{}, "", false
}

// fits reports why s cannot be published as it is, or nil.
func fits(s State) error {
	if err := s.Validate(); err != nil {
		return err
	}
	b, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("%w: fleet: %v", ErrInvalid, err)
	}
	if len(b) > MaxStateBytes {
		return fmt.Errorf("%w: fleet: a state of %d bytes exceeds %d", ErrInvalid, len(b), MaxStateBytes)
	}
	return nil
}

// sanitize keeps only printable characters.
func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return ' '
	}, s)
}

// Add sums o into s, key by key for counters and lists. Sums saturate at
// math.MaxInt64: Agones allows counter capacities near it, and a sum that
// wrapped around would be negative, which no event may carry. The maps may
// grow past MaxAggregates; Bound cuts them back.
func (s *Status) Add(o Status) {
	s.Replicas = satAdd(s.Replicas, o.Replicas)
	s.ReadyReplicas = satAdd(s.ReadyReplicas, o.ReadyReplicas)
	s.ReservedReplicas = satAdd(s.ReservedReplicas, o.ReservedReplicas)
	s.AllocatedReplicas = satAdd(s.AllocatedReplicas, o.AllocatedReplicas)
	s.Allocations = satAdd(s.Allocations, o.Allocations)
	s.Players.Count = satAdd(s.Players.Count, o.Players.Count)
	s.Players.Capacity = satAdd(s.Players.Capacity, o.Players.Capacity)
	s.Counters = addAggregates(s.Counters, o.Counters)
	s.Lists = addAggregates(s.Lists, o.Lists)
}

func satAdd(a, b int64) int64 { return SatAdd(a, b) }

// SatAdd adds two numbers, saturating at math.MaxInt64 and math.MinInt64
// instead of wrapping around. Every sum over fleets of several clusters
// uses it: one cluster reporting a number near the limit must not turn
// another's figures negative.
func SatAdd(a, b int64) int64 {
	switch {
	case b > 0 && a > math.MaxInt64-b:
		return math.MaxInt64
	case b < 0 && a < math.MinInt64-b:
		return math.MinInt64
	}
	return a + b
}

func addAggregates(dst, src map[string]Aggregate) map[string]Aggregate {
	if len(src) == 0 {
		return dst
	}
	if dst == nil {
		dst = make(map[string]Aggregate, len(src))
	}
	for k, v := range src {
		d := dst[k]
		d.Count = satAdd(d.Count, v.Count)
		d.Capacity = satAdd(d.Capacity, v.Capacity)
		d.AllocatedCount = satAdd(d.AllocatedCount, v.AllocatedCount)
		d.AllocatedCapacity = satAdd(d.AllocatedCapacity, v.AllocatedCapacity)
		dst[k] = d
	}
	return dst
}

// Bound keeps at most MaxAggregates counters and lists — those of the
// largest capacity, ties by name — and reports whether it dropped any.
// Totals summed over a cluster whose fleets name more than MaxAggregates
// counters or lists would otherwise be an invalid snapshot.
func (s *Status) Bound() bool {
	c := boundAggregates(s.Counters)
	l := boundAggregates(s.Lists)
	return c || l
}

func boundAggregates(m map[string]Aggregate) bool {
	if len(m) <= MaxAggregates {
		return false
	}
	names := slices.Collect(maps.Keys(m))
	slices.SortFunc(names, func(a, b string) int {
		if c := cmp.Compare(m[b].Capacity, m[a].Capacity); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	for _, n := range names[MaxAggregates:] {
		delete(m, n)
	}
	return true
}

// Equal reports whether s and o carry the same state. Nil and empty maps
// are equal: neither Kubernetes nor Firestore tells them apart reliably.
func (s State) Equal(o State) bool {
	return s.UID == o.UID &&
		maps.Equal(s.Labels, o.Labels) &&
		maps.Equal(s.Annotations, o.Annotations) &&
		s.Spec == o.Spec &&
		s.Status.Equal(o.Status) &&
		s.Degraded == o.Degraded &&
		s.Rollout.Complete == o.Rollout.Complete &&
		slices.Equal(s.Rollout.Sets, o.Rollout.Sets) &&
		slices.Equal(s.Autoscalers, o.Autoscalers) &&
		maps.Equal(s.GameServerLabels, o.GameServerLabels)
}

// Equal reports whether s and o are the same status.
func (s Status) Equal(o Status) bool {
	return s.Replicas == o.Replicas &&
		s.ReadyReplicas == o.ReadyReplicas &&
		s.ReservedReplicas == o.ReservedReplicas &&
		s.AllocatedReplicas == o.AllocatedReplicas &&
		s.Allocations == o.Allocations &&
		s.Players == o.Players &&
		maps.Equal(s.Counters, o.Counters) &&
		maps.Equal(s.Lists, o.Lists)
}

// Clone returns a deep copy of s, so that callers may keep it while the
// source (for example an informer's cache) changes.
func (s State) Clone() State {
	s.Labels = maps.Clone(s.Labels)
	s.Annotations = maps.Clone(s.Annotations)
	s.Status.Counters = maps.Clone(s.Status.Counters)
	s.Status.Lists = maps.Clone(s.Status.Lists)
	s.Rollout.Sets = slices.Clone(s.Rollout.Sets)
	s.Autoscalers = slices.Clone(s.Autoscalers)
	s.GameServerLabels = maps.Clone(s.GameServerLabels)
	return s
}

// Validate reports the first reason s cannot be stored, naming the field.
func (s State) Validate() error {
	if len(s.UID) > MaxUIDLen || !printable(s.UID) {
		return fmt.Errorf("%w: fleet.uid: must be at most %d printable characters", ErrInvalid, MaxUIDLen)
	}
	if len(s.Degraded) > MaxDegradedLen || !printable(s.Degraded) {
		return fmt.Errorf("%w: fleet.degraded: must be at most %d printable characters", ErrInvalid, MaxDegradedLen)
	}
	if err := ValidateLabels("fleet.labels", s.Labels); err != nil {
		return err
	}
	if err := ValidateLabels("fleet.gameServerLabels", s.GameServerLabels); err != nil {
		return err
	}
	if len(s.Annotations) > MaxAnnotations {
		return fmt.Errorf("%w: fleet.annotations: %d entries, at most %d", ErrInvalid, len(s.Annotations), MaxAnnotations)
	}
	for _, k := range slices.Sorted(maps.Keys(s.Annotations)) {
		if err := validateQualifiedName(k); err != nil {
			return fmt.Errorf("%w: fleet.annotations key %q: %v", ErrInvalid, k, err)
		}
		if v := s.Annotations[k]; len(v) > MaxAnnotationValue || !utf8.ValidString(v) {
			return fmt.Errorf("%w: fleet.annotations[%q]: value must be valid UTF-8 of at most %d bytes", ErrInvalid, k, MaxAnnotationValue)
		}
	}
	switch s.Spec.Scheduling {
	case "", "Packed", "Distributed":
	default:
		return fmt.Errorf("%w: fleet.spec.scheduling %q: must be Packed or Distributed", ErrInvalid, s.Spec.Scheduling)
	}
	switch s.Spec.StrategyType {
	case "", "RollingUpdate", "Recreate":
	default:
		return fmt.Errorf("%w: fleet.spec.strategyType %q: must be RollingUpdate or Recreate", ErrInvalid, s.Spec.StrategyType)
	}
	if s.Spec.Replicas < 0 {
		return fmt.Errorf("%w: fleet.spec.replicas %d: must not be negative", ErrInvalid, s.Spec.Replicas)
	}
	if err := s.Status.validate("fleet.status"); err != nil {
		return err
	}
	if err := s.Rollout.validate(); err != nil {
		return err
	}
	return validateAutoscalers(s.Autoscalers)
}

func (s Status) validate(field string) error {
	for _, n := range []struct {
		name string
		v    int64
	}{
		{"replicas", s.Replicas},
		{"readyReplicas", s.ReadyReplicas},
		{"reservedReplicas", s.ReservedReplicas},
		{"allocatedReplicas", s.AllocatedReplicas},
		{"allocations", s.Allocations},
		{"players.count", s.Players.Count},
		{"players.capacity", s.Players.Capacity},
	} {
		if n.v < 0 {
			return fmt.Errorf("%w: %s.%s %d: must not be negative", ErrInvalid, field, n.name, n.v)
		}
	}
	if err := validateAggregates(field+".counters", s.Counters); err != nil {
		return err
	}
	return validateAggregates(field+".lists", s.Lists)
}

func validateAggregates(field string, m map[string]Aggregate) error {
	if len(m) > MaxAggregates {
		return fmt.Errorf("%w: %s: %d entries, at most %d", ErrInvalid, field, len(m), MaxAggregates)
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if err := validateFieldName(k, MaxAggregateKey); err != nil {
			return fmt.Errorf("%w: %s key %q: %v", ErrInvalid, field, k, err)
		}
		a := m[k]
		if a.Count < 0 || a.Capacity < 0 || a.AllocatedCount < 0 || a.AllocatedCapacity < 0 {
			return fmt.Errorf("%w: %s[%q]: counts and capacities must not be negative", ErrInvalid, field, k)
		}
	}
	return nil
}

// ValidateLabels checks a label map as Kubernetes would (qualified-name keys,
// values of at most 63 characters) and bounds its size. field names it in
// errors.
func ValidateLabels(field string, labels map[string]string) error {
	if len(labels) > MaxLabels {
		return fmt.Errorf("%w: %s: %d entries, at most %d", ErrInvalid, field, len(labels), MaxLabels)
	}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if err := validateQualifiedName(k); err != nil {
			return fmt.Errorf("%w: %s key %q: %v", ErrInvalid, field, k, err)
		}
		if err := validateLabelValue(labels[k]); err != nil {
			return fmt.Errorf("%w: %s[%q]: %v", ErrInvalid, field, k, err)
		}
	}
	return nil
}

// validateQualifiedName is Kubernetes' rule for label and annotation keys:
// an optional DNS-1123 subdomain prefix and "/", then a name of at most 63
// characters of [A-Za-z0-9-_.] starting and ending alphanumeric.
func validateQualifiedName(k string) error {
	name := k
	if i := strings.IndexByte(k, '/'); i >= 0 {
		if err := validateDNSSubdomain(k[:i]); err != nil {
			return fmt.Errorf("prefix %v", err)
		}
		name = k[i+1:]
	}
	if name == "" {
		return fmt.Errorf("name must not be empty")
	}
	if len(name) > maxLabelLen {
		return fmt.Errorf("name must be at most %d characters", maxLabelLen)
	}
	if !isLabelish(name) {
		return fmt.Errorf("name must consist of alphanumeric characters, '-', '_' or '.', and start and end with an alphanumeric character")
	}
	return nil
}

func validateLabelValue(v string) error {
	if v == "" {
		return nil
	}
	if len(v) > maxLabelLen {
		return fmt.Errorf("value must be at most %d characters", maxLabelLen)
	}
	if !isLabelish(v) {
		return fmt.Errorf("value must consist of alphanumeric characters, '-', '_' or '.', and start and end with an alphanumeric character")
	}
	return nil
}

func isLabelish(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := isLowerAlnum(c) || ('A' <= c && c <= 'Z')
		if !alnum && (i == 0 || i == len(s)-1 || (c != '-' && c != '_' && c != '.')) {
			return false
		}
	}
	return true
}

// ValidateAggregateKey reports whether k may name a counter or a list
// (fleet.status.counters and lists).
func ValidateAggregateKey(k string) error {
	if err := validateFieldName(k, MaxAggregateKey); err != nil {
		return fmt.Errorf("%w: counter or list %q: %v", ErrInvalid, k, err)
	}
	return nil
}

// validateFieldName accepts a user-defined key (a counter or list name) as a
// Firestore map key: valid UTF-8, printable, bounded, and not of the form
// __name__ that Firestore reserves.
func validateFieldName(k string, maxLen int) error {
	switch {
	case k == "":
		return fmt.Errorf("must not be empty")
	case len(k) > maxLen:
		return fmt.Errorf("must be at most %d bytes", maxLen)
	case !printable(k):
		return fmt.Errorf("must be printable UTF-8")
	case len(k) >= 4 && strings.HasPrefix(k, "__") && strings.HasSuffix(k, "__"):
		return fmt.Errorf("must not match __.*__ (reserved by Firestore)")
	}
	return nil
}

func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}
