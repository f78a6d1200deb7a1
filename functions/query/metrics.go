package query

import (
	"bytes"
	"net/http"

	"github.com/prometheus/common/expfmt"

	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/fleetapi/fleetmetrics"
)

// metrics serves /metrics: the view's capacity figures in the Prometheus
// format the scraper accepts (package fleetmetrics), gzipped when it
// accepts that. The fleets' figures are computed, encoded and gzipped
// once per version of the view and format (fleetmetrics.Cache,
// Snapshot.Gzip), so that any number of scrapers cost one computation per
// change; a snapshot of the view is
// immutable, so a slow scraper holds nothing back.
func (h *Handler) metrics(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		h.failStatus(w, r, http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED", "", "method "+r.Method+" not allowed; use GET")
		return
	}
	if err := h.metricsRefusal(r); err != nil {
		h.fail(w, r, err)
		return
	}
	if err := noParams(r); err != nil {
		h.fail(w, r, err)
		return
	}
	if h.svc == nil {
		h.fail(w, r, &fleetapi.Error{Code: fleetapi.NotFound, Message: "this query service answers over partitions (PARTITIONS): " +
			"scrape each partition's query service for its clusters' metrics"})
		return
	}
	// Computing and encoding are heavy (Service.Admit); the slot is
	// freed before the answer is written, so a slow scraper holds none.
	release, err := h.svc.Admit(r.Context())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	var snap *fleetmetrics.Snapshot
	if err := h.svc.Read(r.Context(), func(rd *fleetapi.Read) error {
		snap = h.metricsCache.Collect(rd)
		return nil
	}); err != nil {
		release()
		h.fail(w, r, err)
		return
	}
	format := expfmt.Negotiate(r.Header)
	gz := acceptsGzip(r)
	var parts [][]byte
	if r.Method != http.MethodHead {
		if gz {
			parts, err = snap.Gzip(format)
		} else {
			var body bytes.Buffer
			err = snap.Write(&body, format)
			parts = [][]byte{body.Bytes()}
		}
	}
	release()
	if err != nil {
		h.fail(w, r, &fleetapi.Error{Code: fleetapi.Internal, Message: "cannot encode the metrics", Err: err})
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", string(format))
	hd.Set("Cache-Control", "no-store")
	hd.Set("Vary", "Accept-Encoding, Accept")
	if gz {
		hd.Set("Content-Encoding", "gzip")
	}
	w.WriteHeader(http.StatusOK)
	for _, p := range parts {
		if _, err := w.Write(p); err != nil {
			return // the scraper left
		}
	}
}

// MetricsComputations counts the times /metrics computed the fleets'
// figures: once per version of the view it was scraped at, whatever the
// number of scrapers (make bench reports it against the versions).
func (h *Handler) MetricsComputations() int64 { return h.metricsCache.Computations() }
