package fleetmetrics

import (
	"bytes"
	"io"
	"iter"
	"maps"
	"slices"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/protobuf/proto"
)

// Write encodes the snapshot in format (one expfmt.Negotiate chose): the
// fleets' families, encoded once per format for every scrape that shares
// them, then the clusters'.
func (s *Snapshot) Write(w io.Writer, format expfmt.Format) error {
	b, err := s.fleets.encode(format)
	if err != nil {
		return err
	}
	if _, err := w.Write(b); err != nil {
		return err
	}
	return encode(w, format, s.clusterFamilies(), true)
}

// encode returns the fleets' families in format, encoding them the first
// time.
func (s *fleets) encode(format expfmt.Format) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.encoded[format]; ok {
		return b, nil
	}
	var buf bytes.Buffer
	if err := encode(&buf, format, s.families(), false); err != nil {
		return nil, err
	}
	if s.encoded == nil {
		s.encoded = map[expfmt.Format][]byte{}
	}
	s.encoded[format] = buf.Bytes()
	return buf.Bytes(), nil
}

// encode writes families in format; closing writes what ends an answer
// (OpenMetrics' "# EOF").
func encode(w io.Writer, format expfmt.Format, families iter.Seq[*dto.MetricFamily], closing bool) error {
	enc := expfmt.NewEncoder(w, format)
	for mf := range families {
		if len(mf.Metric) == 0 {
			continue // the text format has no empty family: expfmt refuses one
		}
		if err := enc.Encode(mf); err != nil {
			return err
		}
	}
	if c, ok := enc.(expfmt.Closer); ok && closing {
		return c.Close()
	}
	return nil
}

// families builds the fleets' metric families one by one: only one
// family's messages are held at a time.
func (s *fleets) families() iter.Seq[*dto.MetricFamily] {
	return func(yield func(*dto.MetricFamily) bool) {
		// Every row's label pairs, shared by its series of every family.
		pairs := make([][]*dto.LabelPair, len(s.rows))
		for i, g := range s.rows {
			pairs[i] = make([]*dto.LabelPair, len(s.labelNames))
			for j := range s.labelNames {
				pairs[i][j] = &dto.LabelPair{Name: &s.labelNames[j], Value: &g.labels[j]}
			}
		}
		summed := ""
		if s.aggregated {
			summed = " Summed over the series' fleets (fleetcast_fleets)."
		}
		for k, gauge := range fleetGauges {
			if !yield(s.family(gauge.name, gauge.help+summed, pairs, func(g *row) (float64, bool) { return g.gauges[k], true })) {
				return
			}
		}
		rolloutHelp := "1 when the fleet's rollout is complete (its current GameServerSet alone runs all its replicas), 0 while it rolls out; absent while unknown."
		if s.aggregated {
			rolloutHelp = "The fleets whose rollout is complete (of those whose rollout is known)."
		}
		if !yield(s.family(nameRollout, rolloutHelp, pairs, func(g *row) (float64, bool) {
			return float64(g.complete), g.rollouts > 0
		})) {
			return
		}
		if s.aggregated && !yield(s.family(nameFleets, "The live fleets summed into the series.", pairs, func(g *row) (float64, bool) {
			return float64(g.fleets), true
		})) {
			return
		}
		if !yield(s.keyed(nameCounter, "counter", "Capacity the fleet's game servers have left in a counter (capacity - count)."+summed, pairs, func(g *row) map[string]int64 { return g.counters })) {
			return
		}
		if !yield(s.keyed(nameList, "list", "Capacity the fleet's game servers have left in a list (capacity - values)."+summed, pairs, func(g *row) map[string]int64 { return g.lists })) {
			return
		}
	}
}

// clusterFamilies builds the clusters' families and the answer's own.
func (s *Snapshot) clusterFamilies() iter.Seq[*dto.MetricFamily] {
	return func(yield func(*dto.MetricFamily) bool) {
		for _, f := range []struct {
			name, help string
			v          func(c clusterRow) float64
		}{
			{nameHeartbeat, "Seconds since the cluster's publisher took its last snapshot (its heartbeat).", func(c clusterRow) float64 { return c.age }},
			{nameStale, "1 when the cluster's heartbeat is older than STALE_AFTER or its fleets exceed the view's budget: its fleets are left out.", func(c clusterRow) float64 { return b2f(c.stale) }},
			{nameClusterSize, "Fleets the cluster's last snapshot counted.", func(c clusterRow) float64 { return float64(c.fleets) }},
		} {
			mf := newFamily(f.name, f.help, len(s.clusters))
			for _, c := range s.clusters {
				mf.Metric = append(mf.Metric, gaugeMetric(f.v(c), &dto.LabelPair{Name: proto.String("cluster"), Value: proto.String(c.name)}))
			}
			if !yield(mf) {
				return
			}
		}
		for _, f := range []struct {
			name, help string
			v          float64
		}{
			{nameAggregated, "1 when the fleet series are sums by cluster and the label_* labels, 0 when each is one fleet.", b2f(s.aggregated)},
			{nameOmitted, "Series left out of this answer by the series limit (METRICS_MAX_SERIES).", float64(s.omitted)},
		} {
			mf := newFamily(f.name, f.help, 1)
			mf.Metric = append(mf.Metric, gaugeMetric(f.v))
			if !yield(mf) {
				return
			}
		}
	}
}

func (s *fleets) family(name, help string, pairs [][]*dto.LabelPair, value func(*row) (float64, bool)) *dto.MetricFamily {
	mf := newFamily(name, help, len(s.rows))
	sl := newSlab(len(s.rows))
	for i, g := range s.rows {
		if v, ok := value(g); ok {
			mf.Metric = append(mf.Metric, sl.metric(v, pairs[i]))
		}
	}
	return mf
}

// keyed builds a family with one series per row and key of its map.
func (s *fleets) keyed(name, keyLabel, help string, pairs [][]*dto.LabelPair, m func(*row) map[string]int64) *dto.MetricFamily {
	n := 0
	for _, g := range s.rows {
		n += len(m(g))
	}
	mf := newFamily(name, help, n)
	sl := newSlab(n)
	keyPairs := make([]dto.LabelPair, n)
	width := len(s.labelNames) + 1
	labels := make([]*dto.LabelPair, n*width)
	j := 0
	for i, g := range s.rows {
		vals := m(g)
		for _, k := range slices.Sorted(maps.Keys(vals)) {
			kp := &keyPairs[j]
			kp.Name, kp.Value = &keyLabel, proto.String(k)
			lp := labels[j*width : (j+1)*width : (j+1)*width]
			copy(lp, pairs[i])
			lp[width-1] = kp
			mf.Metric = append(mf.Metric, sl.metric(float64(vals[k]), lp))
			j++
		}
	}
	return mf
}

func newFamily(name, help string, n int) *dto.MetricFamily {
	return &dto.MetricFamily{Name: proto.String(name), Help: proto.String(help), Type: dto.MetricType_GAUGE.Enum(), Metric: make([]*dto.Metric, 0, n)}
}

// slab hands out one family's messages from three allocations, not three
// a series: at 10 000 fleets a scrape builds about 70 000. Its size is the
// family's count of series, counted before.
type slab struct {
	metrics []dto.Metric
	gauges  []dto.Gauge
	values  []float64
	next    int
}

func newSlab(n int) *slab {
	return &slab{metrics: make([]dto.Metric, n), gauges: make([]dto.Gauge, n), values: make([]float64, n)}
}

func (s *slab) metric(v float64, labels []*dto.LabelPair) *dto.Metric {
	i := s.next
	s.next++
	s.values[i] = v
	s.gauges[i].Value = &s.values[i]
	s.metrics[i].Label, s.metrics[i].Gauge = labels, &s.gauges[i]
	return &s.metrics[i]
}

func gaugeMetric(v float64, labels ...*dto.LabelPair) *dto.Metric {
	return &dto.Metric{Label: labels, Gauge: &dto.Gauge{Value: proto.Float64(v)}}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
