package fleetapi

import (
	"fmt"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleet"
)

// BenchmarkViewAnswer measures the view's own work for one answer of
// GET /v1/fleets?orderBy=…&pageSize=100&selector=… over 10 000 fleets
// (a quarter match): matching, the page and its items, from one reading
// of the view, with no sync. In name order the index's set is the answer
// (its count the total, the page read from it); by ready game servers
// every fleet of the set is read and ranked.
func BenchmarkViewAnswer(b *testing.B) {
	for _, c := range []struct {
		order string
		page  int
	}{{OrderByReady, 1}, {OrderByReady, 10}, {OrderByName, 1}, {OrderByName, 10}} {
		order, page := c.order, c.page
		name := fmt.Sprintf("page=%d", page) // by ready: BENCHMARKS.md's name since before the index
		if order != OrderByReady {
			name = fmt.Sprintf("order=%s/page=%d", order, page)
		}
		b.Run(name, func(b *testing.B) {
			w := newWorld(b)
			for i := range 10000 {
				w.Put(doc(fmt.Sprintf("c%d", i%3), "games", fmt.Sprintf("f%05d", i),
					map[string]string{"platform": []string{"pc", "ps5"}[i%2], "app.kubernetes.io/version": []string{"1.41", "1.42"}[(i/2)%2]},
					int64(i%10), map[string]fleet.DocAggregate{}))
			}
			for _, c := range []string{"c0", "c1", "c2"} {
				w.Heartbeat(c, 0)
			}
			svc := w.service(Options{})
			v, err := url.ParseQuery("orderBy=" + order + "&pageSize=100&selector=platform%3Dpc%2Capp.kubernetes.io%2Fversion%3D1.42")
			require.NoError(b, err)
			q, err := ParseQuery(v)
			require.NoError(b, err)
			for range page - 1 {
				l, err := svc.ListFleets(b.Context(), q)
				require.NoError(b, err)
				q, err = q.Next(l.NextPageToken)
				require.NoError(b, err)
			}
			b.ReportAllocs()
			require.NoError(b, svc.Read(b.Context(), func(r *Read) error {
				b.ResetTimer()
				for b.Loop() {
					if _, err := r.Fleets(q); err != nil {
						return err
					}
				}
				return nil
			}))
		})
	}
}

// BenchmarkViewAnswerSparse measures one answer of GET
// /v1/fleets?selector=tier=gold&pageSize=100 (in name order) where the
// selector matches 100 fleets, in views of 10 000 and of 100 000 fleets:
// the index's set is read by slot and sorted, so the answer costs what it
// matches, not what the view holds (the ratio of the two, near 1).
func BenchmarkViewAnswerSparse(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("fleets=%d", n), func(b *testing.B) {
			w := newWorld(b)
			for i := range n {
				labels := map[string]string{"platform": []string{"pc", "ps5"}[i%2]}
				if i%(n/100) == 0 {
					labels["tier"] = "gold"
				}
				w.Put(doc(fmt.Sprintf("c%d", i%3), "games", fmt.Sprintf("f%06d", i), labels, int64(i%10), map[string]fleet.DocAggregate{}))
			}
			for _, c := range []string{"c0", "c1", "c2"} {
				w.Heartbeat(c, 0)
			}
			svc := w.service(Options{})
			v, err := url.ParseQuery("orderBy=" + OrderByName + "&pageSize=100&selector=tier%3Dgold")
			require.NoError(b, err)
			q, err := ParseQuery(v)
			require.NoError(b, err)
			b.ReportAllocs()
			require.NoError(b, svc.Read(b.Context(), func(r *Read) error {
				l, err := r.Fleets(q)
				if err != nil {
					return err
				}
				require.Len(b, l.Items, 100)
				b.ResetTimer()
				for b.Loop() {
					if _, err := r.Fleets(q); err != nil {
						return err
					}
				}
				return nil
			}))
		})
	}
}
