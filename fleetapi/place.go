package fleetapi

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/fleetcast/fleetcast/fleet"
)

// PlaceRequest asks where a match can go now.
type PlaceRequest struct {
	// Filter narrows the fleets as a fleet query does; its ordering and
	// paging are not used, and its Counter and List thresholds are Need's.
	Filter Query
	Need   Need
	// Count is how many candidates to return, best first (1 to
	// MaxPlacements; 1 when 0).
	Count int
	// Policy replaces the Service's default policy (Options.Policy) when
	// set.
	Policy *Policy
	// Rand draws the weighted choice; math/rand/v2's source when nil.
	// Tests fix it; a *rand.Rand is not safe for concurrent use.
	Rand *rand.Rand
}

// Placement is one candidate for a match.
type Placement struct {
	Cluster   string            `json:"cluster"`
	Namespace string            `json:"namespace"`
	Name      string            `json:"name"`
	Labels    map[string]string `json:"labels"`
	// AllocatorEndpoint is where to allocate in the cluster (its Agones
	// allocator service, host:port), empty when its publisher does not
	// advertise one.
	AllocatorEndpoint string `json:"allocatorEndpoint"`
	// Resource and Available are the capacity that qualifies the fleet:
	// the available amount (clamped) of gameServers (ready game
	// servers), players, counter:NAME or list:NAME.
	Resource  string `json:"resource"`
	Available int64  `json:"available"`
	// ReadyReplicas are its ready game servers, never more than it runs.
	ReadyReplicas int64 `json:"readyReplicas"`
	// Priority and Weight are its cluster's, from the policy.
	Priority int32 `json:"priority"`
	Weight   int32 `json:"weight"`
	// Freshness: when its publisher observed the state (its clock), how
	// long the state took to reach Firestore, and how long ago the query
	// side last heard from its cluster (a heartbeat, on its clock).
	ObservedAt         time.Time `json:"observedAt"`
	LagMillis          int64     `json:"lagMillis"`
	HeartbeatAgeMillis int64     `json:"heartbeatAgeMillis"`
	Stale              bool      `json:"stale"`
	// DrawKey is the draw that ranked it within its priority: an
	// exponential variate divided by its weight, smaller first. The
	// answers of partitions, each drawing its own fleets, merge by it
	// (Partitions.Place) into the ranking one view of them draws.
	DrawKey float64 `json:"drawKey"`
}

// Placements answers a PlaceRequest.
type Placements struct {
	// Placements are the candidates, best first: by priority, then drawn
	// at random in proportion to weight times available capacity.
	Placements []Placement `json:"placements"`
	// Eligible counts the fleets that could take the match.
	Eligible int `json:"eligible"`
	// LeftOut says why the other fleets could not, by reason.
	LeftOut []LeftOut `json:"leftOut"`
	// Policy is the policy applied, as rules (none: every cluster alike),
	// and PolicySource where it came from: request, default (the
	// service's configuration) or none.
	Policy       []string `json:"policy"`
	PolicySource string   `json:"policySource"`
	// UnavailableClusters are the clusters of the partitions that did
	// not answer (Partitions): none of their fleets is a candidate.
	UnavailableClusters []string `json:"unavailableClusters,omitempty"`
}

var placeParams = map[string]bool{"count": true, "gameServers": true, "players": true, "policy": true}

// pagingParams are the parameters of GET /v1/fleets a placement does not
// take: it has no order and no pages.
var pagingParams = map[string]bool{"orderBy": true, "pageSize": true, "pageToken": true}

// ParsePlace reads the parameters of GET /v1/placements: the filter of
// /v1/fleets (its counter and list thresholds are what the match needs),
// count, gameServers, players and policy (repeated rules,
// SELECTOR:PRIORITY[:WEIGHT]).
func ParsePlace(v url.Values) (PlaceRequest, error) {
	filter := url.Values{}
	for name, vals := range v {
		switch {
		case knownParams[name] && !pagingParams[name]:
			filter[name] = vals
		case placeParams[name]:
		case name == "":
			return PlaceRequest{}, paramErr("(empty)", "a parameter without a name")
		default:
			return PlaceRequest{}, paramErr(name, "unknown parameter")
		}
	}
	q, err := ParseQuery(filter)
	if err != nil {
		return PlaceRequest{}, err
	}
	req := PlaceRequest{Filter: q, Count: 1}
	req.Need.Counter, req.Need.CounterAvailable, req.Filter.Counter, req.Filter.MinAvailable = q.Counter, q.MinAvailable, "", 0
	req.Need.List, req.Need.ListAvailable, req.Filter.List, req.Filter.MinListAvail = q.List, q.MinListAvail, "", 0
	if req.Need.GameServers, err = nonNegative(v, "gameServers"); err != nil {
		return PlaceRequest{}, err
	}
	if req.Need.Players, err = nonNegative(v, "players"); err != nil {
		return PlaceRequest{}, err
	}
	if s, err := single(v, "count"); err != nil {
		return PlaceRequest{}, err
	} else if s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxPlacements {
			return PlaceRequest{}, paramErr("count", "%q: want an integer from 1 to %d", s, MaxPlacements)
		}
		req.Count = n
	}
	if rules, given := v["policy"]; given {
		p, err := ParsePolicy(rules)
		if err != nil {
			return PlaceRequest{}, paramErr("policy", "%v", err)
		}
		req.Policy = &p
	}
	return req, nil
}

// Values returns r as the parameters of GET /v1/placements: ParsePlace of
// them gives r back (but Rand; an empty Policy comes back as its one
// rule, every cluster at priority 0 and weight 1).
func (r PlaceRequest) Values() url.Values {
	q := r.Filter
	q.Counter, q.MinAvailable, q.List, q.MinListAvail = r.Need.Counter, r.Need.CounterAvailable, r.Need.List, r.Need.ListAvailable
	q.OrderBy, q.PageSize, q.After = "", 0, nil
	v := q.Values()
	if r.Count > 1 {
		v.Set("count", strconv.Itoa(r.Count))
	}
	if r.Need.GameServers > 0 {
		v.Set("gameServers", strconv.FormatInt(r.Need.GameServers, 10))
	}
	if r.Need.Players > 0 {
		v.Set("players", strconv.FormatInt(r.Need.Players, 10))
	}
	if r.Policy != nil {
		v["policy"] = r.Policy.Strings()
		if len(r.Policy.Rules) == 0 {
			v["policy"] = []string{":0:1"} // given, and empty: every cluster alike
		}
	}
	return v
}

// Place answers where a match can go now.
func (s *Service) Place(ctx context.Context, req PlaceRequest) (Placements, error) {
	return withRead(ctx, s, func(r *Read) (Placements, error) { return r.Place(req) })
}

// Place ranks the fleets that can take a match (Ranking) and returns the
// best req.Count, with why the others cannot.
func (r *Read) Place(req PlaceRequest) (Placements, error) {
	if err := r.s.holds(req.Filter.Clusters...); err != nil {
		return Placements{}, err
	}
	if err := r.knownKeys(Query{Counter: req.Need.Counter, List: req.Need.List}); err != nil {
		return Placements{}, err
	}
	if req.Count < 0 || req.Count > MaxPlacements {
		return Placements{}, paramErr("count", "%d: want 1 to %d", req.Count, MaxPlacements)
	}
	policy, source := r.s.opts.Policy, "default"
	if req.Policy != nil {
		policy, source = *req.Policy, "request"
	} else if len(policy.Rules) == 0 {
		source = "none"
	}
	filter := req.Filter.normalized()
	filter.Counter, filter.List, filter.IncludeStale = "", "", true
	rk := NewRanking[*fleet.Document](req.Count, req.Rand)
	rules := map[string][2]int32{} // by cluster: priority and weight, -1 weight when no rule matches
	scratch := offers.Get().(*offerScratch)
	defer scratch.put()
	qualified := scratch.offers[:0]
	// Only the fleets the index says the filter may match are read
	// (narrow); the others are counted by cluster from the index's lists:
	// a cluster's fleets less those of the set it read.
	set, exact := r.narrow(filter)
	read := map[string]int{}
	for _, d := range r.snap.In(set, "") {
		read[d.Cluster]++
		if !exact && !filter.Matches(d, false) {
			rk.Leave(FilteredOut, d.Cluster)
			continue
		}
		stale := r.isStale(d.Cluster)
		if stale && !req.Filter.IncludeStale {
			rk.Leave(StaleCluster, d.Cluster)
			continue
		}
		rule, ok := rules[d.Cluster]
		if !ok {
			p, w, matched := policy.For(labels.Set(r.clusterLabels(d.Cluster)))
			rule = [2]int32{p, w}
			if !matched {
				rule[1] = -1
			}
			rules[d.Cluster] = rule
		}
		if rule[1] <= 0 {
			rk.Leave(NotInPolicy, d.Cluster)
			continue
		}
		avail, ok := req.Need.Qualify(d.Status)
		if !ok {
			rk.Leave(TooLittleCapacity, d.Cluster)
			continue
		}
		qualified = append(qualified, offer{doc: d, stale: stale, priority: rule[0], weight: rule[1], avail: avail})
	}
	for c, n := range r.snap.ClusterSizes() {
		rk.LeaveN(FilteredOut, c, n-read[c])
	}
	scratch.offers = qualified
	caps := scratch.caps()
	for _, o := range qualified {
		rk.Offer(o.doc, o.doc.Cluster, o.stale, o.priority, float64(o.weight)*min(float64(o.avail), caps[o.priority]))
	}
	best, left := rk.Result(req.Need, fmt.Sprintf("no heartbeat for %v", r.s.opts.StaleAfter))
	out := Placements{Placements: make([]Placement, 0, len(best)), Eligible: rk.Eligible(), LeftOut: left,
		Policy: policy.Strings(), PolicySource: source}
	for _, c := range best {
		out.Placements = append(out.Placements, r.placement(c, req.Need, rules[c.Value.Cluster][1]))
	}
	return out, nil
}

// offer is a fleet that can take the match, before it is weighed.
type offer struct {
	doc              *fleet.Document
	stale            bool
	priority, weight int32
	avail            int64
}

// MaxWeightOfMedian bounds the capacity that weighs a fleet's chance: at
// most this many times the median available amount of the fleets of its
// priority that can take the match. Capacity is what each cluster reports
// of itself (and, for counters, lists and players, the sum of what each
// game server sets through the SDK): without a bound, one fleet that
// claims a huge capacity would draw every match. With it, however large
// its claim, a fleet among 20 others of the median's size draws 2 ÷ 22 of
// the matches (9.1 %, where a fair share is 1 ÷ 21, 4.8 %). A fleet that
// truly holds more than twice the median still qualifies and is chosen,
// weighed as one of twice the median until it is no larger.
const MaxWeightOfMedian = 2

// CapacityBound returns the most capacity that weighs a candidate's
// chance among candidates of one priority with these capacities:
// MaxWeightOfMedian times their median (the upper one of an even count:
// of two, the larger, so that two fleets share in proportion, and a
// liar among them draws at most what twice a fair share is anyway). It
// reorders capacity.
func CapacityBound(capacity []int64) float64 {
	if len(capacity) == 0 {
		return 0
	}
	return MaxWeightOfMedian * float64(nth(capacity, len(capacity)/2))
}

// nth returns the k-th smallest of a (from 0), reordering a: Hoare's
// selection, in time linear on average.
func nth(a []int64, k int) int64 {
	lo, hi := 0, len(a)-1
	for lo < hi {
		pivot := a[lo+(hi-lo)/2]
		i, j := lo, hi
		for i <= j {
			for a[i] < pivot {
				i++
			}
			for a[j] > pivot {
				j--
			}
			if i <= j {
				a[i], a[j] = a[j], a[i]
				i++
				j--
			}
		}
		switch {
		case k <= j:
			hi = j
		case k >= i:
			lo = i
		default:
			return a[k]
		}
	}
	return a[k]
}

// offerScratch is what one Place holds of its candidates while it weighs
// them, recycled (offers): a placement over 10 000 fleets would otherwise
// allocate most of a megabyte.
type offerScratch struct {
	offers []offer
	avail  []int64
}

var offers = sync.Pool{New: func() any { return new(offerScratch) }}

// maxScratch is the most offers a recycled scratch keeps room for.
const maxScratch = 1 << 16

func (s *offerScratch) put() {
	if cap(s.offers) > maxScratch || cap(s.avail) > maxScratch {
		return
	}
	clear(s.offers[:cap(s.offers)]) // drop the documents
	s.offers = s.offers[:0]
	offers.Put(s)
}

// caps returns, by priority, the CapacityBound of its offers.
func (s *offerScratch) caps() map[int32]float64 {
	caps := map[int32]float64{}
	for _, o := range s.offers {
		if _, done := caps[o.priority]; done {
			continue
		}
		s.avail = s.avail[:0]
		for _, p := range s.offers {
			if p.priority == o.priority {
				s.avail = append(s.avail, p.avail)
			}
		}
		caps[o.priority] = CapacityBound(s.avail)
	}
	return caps
}

func (r *Read) clusterLabels(cluster string) map[string]string {
	if c, ok := r.snap.Cluster(cluster); ok {
		return c.Labels
	}
	return nil
}

// placement shapes a candidate.
func (r *Read) placement(c Candidate[*fleet.Document], need Need, weight int32) Placement {
	d := c.Value
	avail, _ := need.Qualify(d.Status)
	p := Placement{Cluster: d.Cluster, Namespace: d.Namespace, Name: d.Name, Labels: nonNil(d.Labels),
		Resource: need.Resource(), Available: avail, ReadyReplicas: ReadyOf(d.Status), Priority: c.Priority, Weight: weight,
		ObservedAt: d.ObservedAt, LagMillis: d.LagMillis, Stale: c.Stale, DrawKey: c.key}
	if cl, ok := r.snap.Cluster(d.Cluster); ok {
		p.AllocatorEndpoint = cl.AllocatorEndpoint
		p.HeartbeatAgeMillis = max(0, r.now.Sub(cl.IngestedAt).Milliseconds())
	}
	return p
}
