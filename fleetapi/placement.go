package fleetapi

import (
	"cmp"
	"container/heap"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/fleetcast/fleetcast/fleet"
)

// Limits of a placement.
const (
	// MaxPlacements is the most candidates one placement returns.
	MaxPlacements = 100
	// MaxPolicyRules is the most rules a placement policy has.
	MaxPolicyRules = 30
	// MaxPolicyWeight is the largest weight of a policy rule.
	MaxPolicyWeight = 1_000_000
	// maxReasonClusters is the most clusters a LeftOut names.
	maxReasonClusters = 10
)

// Clamped figures. A fleet's numbers are its cluster's own word: a
// cluster reporting more ready game servers than it runs, or more
// capacity available than it has, must not draw every match by it.

// ReadyOf is a fleet's ready game servers, never more than it runs.
func ReadyOf(st *fleet.DocStatus) int64 {
	if st == nil {
		return 0
	}
	return max(0, min(st.ReadyReplicas, st.Replicas))
}

// AvailableOf is a counter's or list's available capacity, never more than
// its capacity less its count.
func AvailableOf(a fleet.DocAggregate) int64 {
	return max(0, min(a.Available, a.Capacity, a.Capacity-max(0, a.Count)))
}

// PlayersAvailable is the players' available capacity, never more than
// their capacity less their count.
func PlayersAvailable(c fleet.DocCapacity) int64 {
	return max(0, min(c.Available, c.Capacity, c.Capacity-max(0, c.Count)))
}

// Resources a placement is weighted by.
const (
	ResourceGameServers = "gameServers"
	ResourcePlayers     = "players"
	resourceCounter     = "counter:"
	resourceList        = "list:"
)

// Need is what a match needs of a fleet. Every need given must be met; the
// capacity that weighs a fleet's chance is the available amount of its
// Resource.
type Need struct {
	// GameServers: at least this many ready game servers (at least one
	// when the placement is weighted by them).
	GameServers int64
	// Players: at least this much player capacity available.
	Players int64
	// Counter, with CounterAvailable: at least that much (at least one)
	// available in the counter.
	Counter          string
	CounterAvailable int64
	// List, with ListAvailable: at least that much (at least one)
	// available in the list.
	List          string
	ListAvailable int64
}

// Resource is what weighs a fleet's chance: the counter when there is
// one, else the list, else the players when they are needed, else the
// ready game servers.
func (n Need) Resource() string {
	switch {
	case n.Counter != "":
		return resourceCounter + n.Counter
	case n.List != "":
		return resourceList + n.List
	case n.Players > 0:
		return ResourcePlayers
	}
	return ResourceGameServers
}

// minimums are the needs with the resource's at least one.
func (n Need) minimums() Need {
	switch n.Resource() {
	case ResourceGameServers:
		n.GameServers = max(n.GameServers, 1)
	case ResourcePlayers:
		n.Players = max(n.Players, 1)
	}
	if n.Counter != "" {
		n.CounterAvailable = max(n.CounterAvailable, 1)
	}
	if n.List != "" {
		n.ListAvailable = max(n.ListAvailable, 1)
	}
	return n
}

// String says what the match needs, e.g. "4 available in counter rooms, 1
// ready game server".
func (n Need) String() string {
	n = n.minimums()
	var parts []string
	if n.Counter != "" {
		parts = append(parts, fmt.Sprintf("%d available in counter %s", n.CounterAvailable, n.Counter))
	}
	if n.List != "" {
		parts = append(parts, fmt.Sprintf("%d available in list %s", n.ListAvailable, n.List))
	}
	if n.Players > 0 {
		parts = append(parts, fmt.Sprintf("%d player slots", n.Players))
	}
	if n.GameServers > 0 {
		parts = append(parts, fmt.Sprintf("%d ready game server%s", n.GameServers, plural(n.GameServers)))
	}
	return strings.Join(parts, ", ")
}

func plural(n int64) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// Qualify returns the clamped available amount of n's Resource in a
// fleet, and whether the fleet meets every need of n.
func (n Need) Qualify(st *fleet.DocStatus) (int64, bool) {
	if st == nil {
		st = &fleet.DocStatus{}
	}
	n = n.minimums()
	ready, players := ReadyOf(st), PlayersAvailable(st.Players)
	counter, hasCounter := st.Counters[n.Counter]
	list, hasList := st.Lists[n.List]
	ok := ready >= n.GameServers && players >= n.Players &&
		(n.Counter == "" || hasCounter && AvailableOf(counter) >= n.CounterAvailable) &&
		(n.List == "" || hasList && AvailableOf(list) >= n.ListAvailable)
	switch n.Resource() {
	case ResourceGameServers:
		return ready, ok
	case ResourcePlayers:
		return players, ok
	}
	if n.Counter != "" {
		return AvailableOf(counter), ok
	}
	return AvailableOf(list), ok
}

// Rule gives the clusters whose labels match its selector a priority and
// a weight, as an Agones GameServerAllocationPolicy gives one cluster.
type Rule struct {
	Clusters labels.Selector
	// Priority: lower first. A placement takes its candidates from the
	// lowest priority that has any, then the next.
	Priority int32
	// Weight scales the chance of the rule's clusters within their
	// priority; 0 never places a match there (a cluster being drained).
	Weight int32
}

// String is the rule as ParseRule reads it: SELECTOR:PRIORITY:WEIGHT.
func (r Rule) String() string {
	sel := ""
	if r.Clusters != nil {
		sel = r.Clusters.String()
	}
	return fmt.Sprintf("%s:%d:%d", sel, r.Priority, r.Weight)
}

// ParseRule reads a rule, SELECTOR:PRIORITY[:WEIGHT]: a label selector of
// cluster labels (empty: every cluster), a priority (0 or more, lower
// first) and a weight (0 to MaxPolicyWeight; 1 when left out), e.g.
// "region=eu-west:0:100", ":1".
func ParseRule(s string) (Rule, error) {
	// Neither label keys nor values hold a colon: the fields after the
	// selector are the last ones.
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return Rule{}, fmt.Errorf("%q: want SELECTOR:PRIORITY[:WEIGHT], e.g. region=eu-west:0:100", s)
	}
	sel, err := ParseSelector(parts[0])
	if err != nil {
		return Rule{}, fmt.Errorf("%q: the cluster selector: %v", s, err)
	}
	p, err := strconv.ParseInt(parts[1], 10, 32)
	if err != nil || p < 0 {
		return Rule{}, fmt.Errorf("%q: priority %q: want an integer from 0 (first) to %d", s, parts[1], int32(1<<31-1))
	}
	r := Rule{Clusters: sel, Priority: int32(p), Weight: 1}
	if len(parts) == 3 {
		w, err := strconv.ParseInt(parts[2], 10, 32)
		if err != nil || w < 0 || w > MaxPolicyWeight {
			return Rule{}, fmt.Errorf("%q: weight %q: want an integer from 0 (never) to %d", s, parts[2], MaxPolicyWeight)
		}
		r.Weight = int32(w)
	}
	return r, nil
}

// Policy says which clusters a placement may use, in which priority and
// with which weight: each cluster takes the first rule its labels match,
// and a cluster no rule matches takes no match. The zero Policy gives
// every cluster priority 0 and weight 1.
type Policy struct {
	Rules []Rule
}

// boundRules refuses a policy of more than MaxPolicyRules rules.
func boundRules(n int) error {
	if n > MaxPolicyRules {
		return fmt.Errorf("%d rules: at most %d", n, MaxPolicyRules)
	}
	return nil
}

// ParsePolicy reads rules as ParseRule does, in order.
func ParsePolicy(rules []string) (Policy, error) {
	if err := boundRules(len(rules)); err != nil {
		return Policy{}, err
	}
	var p Policy
	for _, s := range rules {
		r, err := ParseRule(s)
		if err != nil {
			return Policy{}, err
		}
		p.Rules = append(p.Rules, r)
	}
	return p, nil
}

// Strings are the rules as ParseRule reads them, in order; none for the
// zero Policy.
func (p Policy) Strings() []string {
	out := []string{}
	for _, r := range p.Rules {
		out = append(out, r.String())
	}
	return out
}

// For returns the priority and weight of a cluster with these labels, and
// false when no rule matches it.
func (p Policy) For(clusterLabels labels.Set) (priority, weight int32, ok bool) {
	if len(p.Rules) == 0 {
		return 0, 1, true
	}
	for _, r := range p.Rules {
		if r.Clusters == nil || r.Clusters.Matches(clusterLabels) {
			return r.Priority, r.Weight, true
		}
	}
	return 0, 0, false
}

// Reason says why a fleet was left out of a placement.
type Reason string

// Reasons, in the order a fleet is judged.
const (
	// FilteredOut: the request's filter (clusters, namespace, selector,
	// minimum ready, rollout) does not match it.
	FilteredOut Reason = "FILTERED_OUT"
	// StaleCluster: its cluster is stale (no heartbeat for StaleAfter),
	// or left out of the view for its size.
	StaleCluster Reason = "STALE"
	// NotInPolicy: no rule of the policy matches its cluster, or the
	// rule's weight is 0.
	NotInPolicy Reason = "NOT_IN_POLICY"
	// TooLittleCapacity: it has less than the match needs.
	TooLittleCapacity Reason = "TOO_LITTLE_CAPACITY"
)

var reasons = []Reason{FilteredOut, StaleCluster, NotInPolicy, TooLittleCapacity}

// LeftOut counts the fleets left out of a placement for one reason.
type LeftOut struct {
	Reason Reason `json:"reason"`
	Fleets int    `json:"fleets"`
	// Clusters are the clusters of those fleets, by name: at most 10
	// (ClusterCount counts them all).
	Clusters     []string `json:"clusters"`
	ClusterCount int      `json:"clusterCount"`
	// Message says it in words, for a matchmaker's log.
	Message string `json:"message"`
}

// Ranking ranks candidates for a placement: by priority (lower first),
// and within a priority at random, each candidate's chance of coming
// first proportional to its weight (its cluster's weight times its
// capacity), so that independent matchmakers spread their matches over
// the fleets in proportion to what each can take rather than herding onto
// the one that ranks highest. It keeps the best Count; a fleet of a stale
// cluster, when allowed at all, ranks after every fresh one. The query
// side's Place and fleetwatch's Pick rank with it.
type Ranking[T any] struct {
	count    int
	rnd      *rand.Rand
	top      ranked[T]
	eligible int
	left     map[Reason]map[string]int
}

// NewRanking returns a Ranking keeping the best count candidates (at least
// one), drawing from rnd (math/rand/v2's source when nil).
func NewRanking[T any](count int, rnd *rand.Rand) *Ranking[T] {
	return &Ranking[T]{count: max(count, 1), rnd: rnd, left: map[Reason]map[string]int{}}
}

// Candidate is a fleet a Ranking kept.
type Candidate[T any] struct {
	Value    T
	Stale    bool
	Priority int32
	// key orders a priority's candidates: an exponential draw of rate
	// weight, the smallest first (Efraimidis and Spirakis' weighted
	// sampling): the first is each candidate with probability
	// proportional to its weight, and the next likewise among the rest.
	key float64
}

// Offer considers a candidate of positive weight; one of weight 0 or less
// has no room and is left out as TooLittleCapacity.
func (r *Ranking[T]) Offer(v T, cluster string, stale bool, priority int32, weight float64) {
	if !(weight > 0) {
		r.Leave(TooLittleCapacity, cluster)
		return
	}
	exp := rand.ExpFloat64
	if r.rnd != nil {
		exp = r.rnd.ExpFloat64
	}
	r.eligible++
	c := Candidate[T]{Value: v, Stale: stale, Priority: priority, key: exp() / weight}
	switch {
	case len(r.top) < r.count:
		heap.Push(&r.top, c)
	case r.top.less(c, r.top[0]):
		r.top[0] = c
		heap.Fix(&r.top, 0)
	}
}

// Leave counts a fleet of cluster left out for reason.
func (r *Ranking[T]) Leave(reason Reason, cluster string) { r.LeaveN(reason, cluster, 1) }

// LeaveN records n fleets of cluster left out for reason.
func (r *Ranking[T]) LeaveN(reason Reason, cluster string, n int) {
	if n <= 0 {
		return
	}
	m := r.left[reason]
	if m == nil {
		m = map[string]int{}
		r.left[reason] = m
	}
	m[cluster] += n
}

// Eligible counts the candidates offered with room: the placement's
// candidates are the best Count of them.
func (r *Ranking[T]) Eligible() int { return r.eligible }

// Best returns the candidates kept, best first.
func (r *Ranking[T]) Best() []Candidate[T] {
	return slices.SortedFunc(slices.Values(r.top), func(a, b Candidate[T]) int {
		if r.top.less(a, b) {
			return -1
		}
		return 1
	})
}

// Result returns Best and the fleets left out, by reason in the order
// fleets are judged; need and staleText (why a cluster is stale) word
// their messages.
func (r *Ranking[T]) Result(need Need, staleText string) ([]Candidate[T], []LeftOut) {
	best := r.Best()
	out := []LeftOut{}
	for _, reason := range reasons {
		m := r.left[reason]
		if len(m) == 0 {
			continue
		}
		l := LeftOut{Reason: reason, ClusterCount: len(m)}
		for _, n := range m {
			l.Fleets += n
		}
		names := slices.Sorted(maps.Keys(m))
		l.Clusters = names[:min(len(names), maxReasonClusters)]
		l.Message = leftOutMessage(l, need, staleText)
		out = append(out, l)
	}
	return best, out
}

func leftOutMessage(l LeftOut, need Need, staleText string) string {
	fleets := fmt.Sprintf("%d fleet%s", l.Fleets, plural(int64(l.Fleets)))
	do, have := "do", "have"
	if l.Fleets == 1 {
		do, have = "does", "has"
	}
	switch l.Reason {
	case FilteredOut:
		return fmt.Sprintf("%s %s not match the filter", fleets, do)
	case StaleCluster:
		return fmt.Sprintf("%s of stale clusters (%s): %s", fleets, strings.Join(l.Clusters, ", "), staleText)
	case NotInPolicy:
		return fmt.Sprintf("%s of clusters the policy gives no rule or weight 0 (%s)", fleets, strings.Join(l.Clusters, ", "))
	}
	return fmt.Sprintf("%s %s less than the match needs (%s)", fleets, have, need)
}

// ranked is a max-heap of candidates: its top is the worst kept.
type ranked[T any] []Candidate[T]

// less orders candidates best first: fresh before stale, then by
// priority, then by key.
func (h ranked[T]) less(a, b Candidate[T]) bool {
	if a.Stale != b.Stale {
		return !a.Stale
	}
	return cmp.Or(cmp.Compare(a.Priority, b.Priority), cmp.Compare(a.key, b.key)) < 0
}

func (h ranked[T]) Len() int           { return len(h) }
func (h ranked[T]) Less(i, j int) bool { return h.less(h[j], h[i]) }
func (h ranked[T]) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *ranked[T]) Push(x any)        { *h = append(*h, x.(Candidate[T])) }
func (h *ranked[T]) Pop() any {
	old := *h
	c := old[len(old)-1]
	*h = old[:len(old)-1]
	return c
}
