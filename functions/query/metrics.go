package query

import (
	"compress/gzip"
	"io"
	"net/http"

	"github.com/prometheus/common/expfmt"

	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/fleetapi/fleetmetrics"
)

// metrics serves /metrics: the view's capacity figures in the Prometheus
// format the scraper accepts (package fleetmetrics), gzipped when it
// accepts that. The fleets' figures are computed and encoded once per
// version of the view and format (fleetmetrics.Cache), so that any number
// of scrapers cost one computation per change; a snapshot of the view is
// immutable, so a slow scraper holds nothing back.
func (h *Handler) metrics(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		h.failStatus(w, r, http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED", "", "method "+r.Method+" not allowed; use GET")
		return
	}
	if err := noParams(r); err != nil {
		h.fail(w, r, err)
		return
	}
	var snap *fleetmetrics.Snapshot
	if err := h.svc.Read(r.Context(), func(rd *fleetapi.Read) error {
		snap = h.metricsCache.Collect(rd)
		return nil
	}); err != nil {
		h.fail(w, r, err)
		return
	}
	format := expfmt.Negotiate(r.Header)
	hd := w.Header()
	hd.Set("Content-Type", string(format))
	hd.Set("Cache-Control", "no-store")
	hd.Set("Vary", "Accept-Encoding, Accept")
	var out io.Writer = w
	if acceptsGzip(r) {
		hd.Set("Content-Encoding", "gzip")
		zw, _ := gzip.NewWriterLevel(w, gzip.BestSpeed) // a valid level: no error
		defer zw.Close()
		out = zw
	}
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	if err := snap.Write(out, format); err != nil {
		// Headers are sent: the scraper sees a truncated answer and
		// fails the scrape, which its own metrics report.
		h.log.WarnContext(r.Context(), "writing /metrics failed", "error", err.Error())
	}
}
