package query

import (
	"net/http"

	"github.com/fleetcast/fleetcast/version"
)

// Program is how the query API names itself in GET /v1/version.
const Program = "fleetcast-query"

// version answers GET /v1/version: the instance's build (version.Info), as
// Kubernetes' /version does its API server's; fleetcast version --api
// shows it as the server's.
func (h *Handler) version(w http.ResponseWriter, r *http.Request) {
	if !h.readOnly(w, r) {
		return
	}
	if err := noParams(r); err != nil {
		h.fail(w, r, err)
		return
	}
	h.reply(w, r, version.Get(Program), "", false, func() {})
}
