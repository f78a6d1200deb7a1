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
