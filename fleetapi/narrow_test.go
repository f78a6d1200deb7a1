package fleetapi

import (
	"fmt"
	"math/rand/v2"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleet"
)

// TestTheIndexAnswersAsAScanWould: random queries (clusters, stale ones
// or not, selectors of every operator, a namespace, a minimum, each
// order, pages of any size) over a view that changes between rounds
// (fleets added, relabelled, removed; a cluster stale, one without a
// document) answer, page after page, the fleets that a scan of every
// document with Query.Matches finds, in the query's order, with its
// total.
func TestTheIndexAnswersAsAScanWould(t *testing.T) {
	w := newWorld(t)
	rng := rand.New(rand.NewPCG(8, 9))
	clusters := []string{"pc", "ps5", "xbox", "nodoc"}
	w.Heartbeat("pc", 0)
	w.Heartbeat("ps5", 0)
	w.Heartbeat("xbox", time.Hour) // stale; nodoc has no document: stale too
	values := map[string][]string{"platform": {"pc", "ps5"}, "version": {"1.41", "1.42", "1.43"}, "mode": {"ranked"}, "tier": {"1", "2", "3"}}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range values {
			if !yield(k) {
				return
			}
		}
	})
	live := map[string]*fleet.Document{}
	put := func() {
		labels := map[string]string{}
		for _, k := range keys {
			if rng.IntN(3) > 0 {
				labels[k] = values[k][rng.IntN(len(values[k]))]
			}
		}
		d := doc(clusters[rng.IntN(len(clusters))], []string{"games", "beta"}[rng.IntN(2)], fmt.Sprintf("f%03d", rng.IntN(150)), labels, rng.Int64N(4), nil)
		w.Put(d)
		live[d.Key().DocID()] = d
	}
	for range 200 {
		put()
	}
	requirement := func() string {
		k := keys[rng.IntN(len(keys))]
		vs := values[k]
		v := vs[rng.IntN(len(vs))]
		switch rng.IntN(8) {
		case 0:
			return k + "=" + v
		case 1:
			return k + "!=" + v
		case 2:
			return k + " in (" + v + "," + vs[0] + ")"
		case 3:
			return k + " notin (" + v + ")"
		case 4:
			return k
		case 5:
			return "!" + k
		case 6:
			return "tier>1"
		}
		return "nope=x"
	}
	svc := w.service(Options{})
	for round := range 12 {
		for range 150 {
			v := url.Values{}
			for range rng.IntN(3) {
				v.Add("cluster", clusters[rng.IntN(len(clusters))])
			}
			if rng.IntN(3) == 0 {
				v.Set("includeStale", "true")
			}
			var reqs []string
			for range rng.IntN(4) {
				reqs = append(reqs, requirement())
			}
			if len(reqs) > 0 {
				v.Set("selector", strings.Join(reqs, ","))
			}
			if rng.IntN(5) == 0 {
				v.Set("namespace", "beta")
			}
			if rng.IntN(5) == 0 {
				v.Set("minReady", "2")
			}
			if rng.IntN(3) == 0 {
				v.Set("orderBy", OrderByReady)
			}
			v.Set("pageSize", fmt.Sprint(1+rng.IntN(40)))
			q, err := ParseQuery(v)
			require.NoError(t, err, v.Encode())

			var want []string
			var matched []item
			for id, d := range live {
				stale := d.Cluster == "xbox" || d.Cluster == "nodoc"
				if q.Matches(d, stale) {
					matched = append(matched, item{id: id, doc: d})
				}
			}
			slices.SortFunc(matched, q.normalized().compare)
			for _, e := range matched {
				want = append(want, e.doc.Cluster+"/"+e.doc.Namespace+"/"+e.doc.Name)
			}
			var got []string
			for page := 0; ; page++ {
				l, err := svc.ListFleets(t.Context(), q)
				require.NoError(t, err, v.Encode())
				require.Equal(t, len(want), l.TotalSize, "round %d, %s, page %d: the total", round, v.Encode(), page)
				got = append(got, names(l.Items)...)
				if l.NextPageToken == "" {
					break
				}
				q, err = q.Next(l.NextPageToken)
				require.NoError(t, err)
			}
			if want == nil {
				want = []string{}
			}
			if got == nil {
				got = []string{}
			}
			require.Equal(t, want, got, "round %d: %s", round, v.Encode())
		}
		// Change the view: relabel, add, remove.
		for range 30 {
			put()
		}
		for id, d := range live {
			if rng.IntN(8) == 0 {
				w.Remove(d.Cluster, d.Namespace, d.Name)
				delete(live, id)
			}
		}
		w.Settle()
	}
}
