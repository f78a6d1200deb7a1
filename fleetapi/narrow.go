package fleetapi

import (
	"k8s.io/apimachinery/pkg/selection"

	"github.com/fleetcast/fleetcast/fleetview"
)

// narrow returns the fleets q may match, read from the view's index
// (fleetview.Set) rather than from the documents: those of the clusters
// it names (else every one), fresh unless it includes stale ones, with
// the labels its selector asks for. exact reports whether every fleet of
// the set matches q: its count is then the answer's total, and a page in
// name order reads only the fleets it shows. When it is not (q filters on
// what the index does not hold: a namespace, a figure, a rollout, a label
// compared as a number), each fleet of the set still has to be checked
// with q.Matches.
func (r *Read) narrow(q Query) (set fleetview.Set, exact bool) {
	if set, ok := r.selective(q); ok {
		return set, false
	}
	exact = q.Namespace == "" && q.MinReady == 0 && q.Counter == "" && q.List == "" && q.RolloutComplete == nil
	switch {
	case len(q.Clusters) > 0:
		for _, c := range q.Clusters {
			if q.IncludeStale || !r.isStale(c) {
				set.Or(r.snap.InCluster(c))
			}
		}
	case q.IncludeStale:
		set = r.snap.Every()
	default: // the fresh clusters; a cluster without a document is stale
		for c, stale := range r.stale {
			if !stale {
				set.Or(r.snap.InCluster(c))
			}
		}
	}
	if q.Selector == nil {
		return set, exact
	}
	reqs, selectable := q.Selector.Requirements()
	if !selectable {
		return fleetview.Set{}, true // labels.Nothing
	}
	for _, req := range reqs {
		switch req.Operator() {
		case selection.Equals, selection.DoubleEquals, selection.In:
			set.And(r.labeled(req.Key(), req.ValuesUnsorted()))
		case selection.NotEquals, selection.NotIn:
			set.AndNot(r.labeled(req.Key(), req.ValuesUnsorted()))
		case selection.Exists:
			set.And(r.snap.Keyed(req.Key()))
		case selection.DoesNotExist:
			set.AndNot(r.snap.Keyed(req.Key()))
		default: // gt, lt: compared as numbers, by Matches
			exact = false
		}
	}
	return set, exact
}

// selective returns, when q's selector has a requirement that few fleets
// meet (one that In reads by slot: Snapshot.Sparse), the set of those
// fleets alone, which q may match; the caller checks each of them
// (Query.Matches: its clusters, staleness and other requirements), so that
// a selector matching 100 fleets of a million reads those 100, and never
// the lists of whole clusters or of common labels. The requirement
// chosen is the one the fewest fleets meet, counted from the index.
func (r *Read) selective(q Query) (fleetview.Set, bool) {
	if q.Selector == nil {
		return fleetview.Set{}, false
	}
	reqs, selectable := q.Selector.Requirements()
	if !selectable {
		return fleetview.Set{}, false
	}
	best, fewest := -1, 0
	for i, req := range reqs {
		n := 0
		switch req.Operator() {
		case selection.Equals, selection.DoubleEquals, selection.In:
			for _, v := range req.ValuesUnsorted() {
				n += r.snap.LabeledCount(req.Key(), v)
			}
		case selection.Exists:
			n = r.snap.KeyedCount(req.Key())
		default:
			continue // met by most fleets, or compared as numbers
		}
		if best < 0 || n < fewest {
			best, fewest = i, n
		}
	}
	if best < 0 || !r.snap.Sparse(fewest) {
		return fleetview.Set{}, false
	}
	if req := reqs[best]; req.Operator() == selection.Exists {
		return r.snap.Keyed(req.Key()), true
	} else {
		return r.labeled(req.Key(), req.ValuesUnsorted()), true
	}
}

// labeled is the set of the fleets whose label key has one of values.
func (r *Read) labeled(key string, values []string) fleetview.Set {
	var set fleetview.Set
	for _, v := range values {
		set.Or(r.snap.Labeled(key, v))
	}
	return set
}
