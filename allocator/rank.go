package allocator

import (
	"cmp"
	"maps"
	"math/rand/v2"
	"slices"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
)

// Candidate is a fleet a request may be forwarded to: its cluster's
// policy, the namespace its game servers are in, and the first of the
// request's selectors they may satisfy.
type Candidate struct {
	Policy    *Policy
	Namespace string
	Fleet     string
	// Selector indexes Request.Selectors.
	Selector int
	// Capacity is what weighed its chance (Selector.Match).
	Capacity int64
}

// Applicable returns the policies a request may use, one per cluster:
// with multiClusterSetting enabled, those whose labels include every
// label of its policySelector; otherwise every policy, so that a client
// that asked one cluster's allocator is served by every cluster.
func Applicable(r Request, policies []Policy) map[string]*Policy {
	out := map[string]*Policy{}
	for i := range policies {
		p := &policies[i]
		if r.MultiCluster && !subset(r.PolicyLabels, p.Labels) {
			continue
		}
		if q, ok := out[p.Cluster]; !ok || p.Priority < q.Priority {
			out[p.Cluster] = p
		}
	}
	return out
}

func subset(want, have map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Rank returns up to count candidates for r among the live fleets of the
// fresh clusters of read, best first, as Agones' multi-cluster allocation
// orders its tries and then by capacity: by their policy's priority
// (lower first); within a priority, by the order of the request's
// selectors (a fleet may come once per selector it may satisfy); and
// within those drawn at random, each fleet's chance proportional to its
// policy's weight times its capacity, capped at fleetapi.MaxWeightOfMedian
// times the median of its group as fleetapi's Place caps it. A cluster
// without a policy, or whose policy's weight is 0, takes none.
func Rank(read *fleetapi.Read, r Request, policies map[string]*Policy, count int, rnd *rand.Rand) []Candidate {
	// Groups order by priority, then selector: dense ranks keep the
	// product within an int32 whatever the priorities.
	priorities := map[int32]int32{}
	for _, p := range slices.SortedFunc(maps.Values(policies), func(a, b *Policy) int { return cmp.Compare(a.Priority, b.Priority) }) {
		if _, ok := priorities[p.Priority]; !ok {
			priorities[p.Priority] = int32(len(priorities))
		}
	}
	type offer struct {
		Candidate
		group int32
	}
	var offers []offer
	for d := range read.LiveFleets() {
		p := policies[d.Cluster]
		if p == nil || p.Weight <= 0 || d.Namespace != namespaceIn(r, p) {
			continue
		}
		for i, s := range r.Selectors {
			if capacity, ok := s.Match(d); ok {
				offers = append(offers, offer{Candidate{Policy: p, Namespace: d.Namespace, Fleet: d.Name, Selector: i, Capacity: capacity},
					priorities[p.Priority]*MaxSelectors + int32(i)})
			}
		}
	}
	byGroup := map[int32][]int64{}
	for _, o := range offers {
		byGroup[o.group] = append(byGroup[o.group], o.Capacity)
	}
	caps := map[int32]float64{}
	for g, capacity := range byGroup {
		caps[g] = fleetapi.CapacityBound(capacity)
	}
	rk := fleetapi.NewRanking[Candidate](count, rnd)
	for _, o := range offers {
		rk.Offer(o.Candidate, o.Policy.Cluster, false, o.group, float64(o.Policy.Weight)*min(float64(o.Capacity), caps[o.group]))
	}
	var out []Candidate
	for _, c := range rk.Best() {
		out = append(out, c.Value)
	}
	return out
}

// namespaceIn is the namespace of the game servers a request allocates
// in a policy's cluster: the policy's, else the request's.
func namespaceIn(r Request, p *Policy) string {
	if p.Namespace != "" {
		return p.Namespace
	}
	return r.Namespace
}

// Key is the fleet a candidate names.
func (c Candidate) Key() fleet.Key {
	return fleet.Key{Cluster: c.Policy.Cluster, Namespace: c.Namespace, Name: c.Fleet}
}
