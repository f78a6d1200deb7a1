package fleetapi

import (
	"cmp"
	"slices"
	"strings"

	"github.com/fleetcast/fleetcast/fleet"
)

// MergeFleets merges the answers to q of disjoint views of one deployment
// (its partitions, each asked q with the same page token) into the answer
// one view of all their fleets gives: the first q.PageSize fleets in q's
// order, their total, and the token of the page after them. A page token
// names a position in q's order (the last fleet's sort key and ID), not a
// view, so every partition takes the merged answer's token as its own.
func MergeFleets(q Query, pages []FleetList) FleetList {
	q = q.normalized()
	// Each fleet's sort key and ID are computed once, not at every
	// comparison: a merge of 17 pages of 1 000 sorts 17 000 of them.
	type ranked struct {
		key int64
		id  string
		f   *Fleet
	}
	var all []ranked
	more := false
	out := FleetList{}
	for _, p := range pages {
		for i := range p.Items {
			f := &p.Items[i]
			all = append(all, ranked{key: q.fleetSortKey(*f), id: fleetID(*f), f: f})
		}
		out.TotalSize += p.TotalSize
		more = more || p.NextPageToken != ""
	}
	slices.SortFunc(all, func(a, b ranked) int { return cmp.Or(cmp.Compare(b.key, a.key), strings.Compare(a.id, b.id)) })
	if len(all) > q.PageSize {
		all, more = all[:q.PageSize], true
	}
	out.Items = make([]Fleet, 0, len(all))
	for _, r := range all {
		out.Items = append(out.Items, *r.f)
	}
	if more && len(all) > 0 {
		last := all[len(all)-1]
		out.NextPageToken = Cursor{Query: q.fingerprint(), Key: last.key, ID: last.id}.encode()
	}
	return out
}

// Narrowed returns q for a partition that holds only clusters of those q
// names (nil when it holds none of them: nothing to ask it), at q's
// position: a query naming clusters a partition does not hold is
// refused there, and a page token belongs to its query, so the position
// of q's token moves to the narrowed query's. MergeFleets of the
// partitions' answers to their narrowed queries answers q.
func (q Query) Narrowed(held []string) *Query {
	if len(q.Clusters) == 0 {
		return &q
	}
	n := q
	n.Clusters = nil
	for _, c := range q.Clusters {
		if slices.Contains(held, c) {
			n.Clusters = append(n.Clusters, c)
		}
	}
	if len(n.Clusters) == 0 {
		return nil
	}
	if q.After != nil {
		n.After = &Cursor{Query: n.normalized().fingerprint(), Key: q.After.Key, ID: q.After.ID}
	}
	return &n
}

// fleetID is a fleet's document ID, the order's tie-breaker.
func fleetID(f Fleet) string {
	return fleet.Key{Cluster: f.Cluster, Namespace: f.Namespace, Name: f.Name}.DocID()
}

// fleetSortKey is sortKey of the fleet an answer shows.
func (q Query) fleetSortKey(f Fleet) int64 { return q.sortKeyOf(f.ReadyReplicas, f.Counters, f.Lists) }

// MergeClusters merges the clusters of disjoint views: every one, by
// name, as one view of them lists them.
func MergeClusters(lists []ClusterList) ClusterList {
	out := ClusterList{Items: []Cluster{}}
	for _, l := range lists {
		out.Items = append(out.Items, l.Items...)
	}
	slices.SortFunc(out.Items, func(a, b Cluster) int { return strings.Compare(a.Cluster, b.Cluster) })
	return out
}

// MergeLabelValues merges the values of one label key in disjoint views:
// each value's fleets and game servers summed, its clusters joined; most
// fleets first, then by value, as one view of them answers.
func MergeLabelValues(key string, answers []LabelValues) LabelValues {
	byValue := map[string]*LabelValue{}
	for _, a := range answers {
		for _, v := range a.Values {
			lv := byValue[v.Value]
			if lv == nil {
				lv = &LabelValue{Value: v.Value, Clusters: []string{}}
				byValue[v.Value] = lv
			}
			lv.Fleets += v.Fleets
			lv.ReadyReplicas = fleet.SatAdd(lv.ReadyReplicas, v.ReadyReplicas)
			lv.AllocatedReplicas = fleet.SatAdd(lv.AllocatedReplicas, v.AllocatedReplicas)
			lv.Clusters = append(lv.Clusters, v.Clusters...)
		}
	}
	out := LabelValues{Key: key, Values: []LabelValue{}}
	for _, lv := range byValue {
		slices.Sort(lv.Clusters)
		lv.Clusters = slices.Compact(lv.Clusters)
		out.Values = append(out.Values, *lv)
	}
	slices.SortFunc(out.Values, func(a, b LabelValue) int {
		return cmp.Or(cmp.Compare(b.Fleets, a.Fleets), strings.Compare(a.Value, b.Value))
	})
	return out
}
