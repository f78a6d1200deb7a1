package fleetmetrics

import (
	"strconv"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/singleflight"

	"github.com/fleetcast/fleetcast/fleetapi"
)

// Cache collects the fleets' figures once per version of the view
// (fleetapi.Read.Version), and encodes them once per format asked for:
// any number of scrapers of one version cost one computation, one
// concurrent with it waits for its result rather than repeating it
// (single flight). Only the clusters' figures, a few per cluster, are
// taken at each scrape. It keeps the newest version's figures alone.
type Cache struct {
	opts     Options
	group    singleflight.Group
	mu       sync.Mutex
	version  uint64
	last     *fleets
	computed atomic.Int64
}

// NewCache returns a Cache of the figures o describes.
func NewCache(o Options) *Cache { return &Cache{opts: o} }

// Collect is Collect, the fleets' figures computed once per version.
func (c *Cache) Collect(r *fleetapi.Read) *Snapshot {
	v := r.Version()
	c.mu.Lock()
	f := c.last
	if f != nil && c.version != v {
		f = nil
	}
	c.mu.Unlock()
	if f == nil {
		got, _, _ := c.group.Do(strconv.FormatUint(v, 16), func() (any, error) {
			f := collectFleets(r, c.opts)
			c.computed.Add(1)
			c.mu.Lock()
			c.version, c.last = v, f
			c.mu.Unlock()
			return f, nil
		})
		f = got.(*fleets)
	}
	return &Snapshot{fleets: f, clusters: collectClusters(r)}
}

// Computations counts the times the Cache computed the fleets' figures.
func (c *Cache) Computations() int64 { return c.computed.Load() }
