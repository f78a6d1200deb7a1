// Package fleetcast is the root of the module and the package the Cloud
// Functions Go buildpack builds from the uploaded source: its init
// registers every function with the Functions Framework, and the runtime
// serves the one named by FUNCTION_TARGET. The code lives in the packages
// below, which know nothing of the framework: cmd/fleetcast-query serves
// the query handler without it.
package fleetcast

import (
	// The buildpack generates its declarative main — which only starts the
	// Functions Framework and lets the init() registrations serve — only
	// when this package itself imports the framework's functions package.
	// Without this import it generates a main that calls
	// fleetcast.<FUNCTION_TARGET>, which does not exist, and the build
	// fails. internal/build/buildpack's tests and functions/source check it.
	"github.com/GoogleCloudPlatform/functions-framework-go/functions"

	"github.com/fleetcast/fleetcast/functions/ingest"
	"github.com/fleetcast/fleetcast/functions/query"
)

func init() {
	// IngestFleetEvents: Pub/Sub fleet events → Firestore.
	functions.HTTP("IngestFleetEvents", ingest.IngestFleetEvents)
	// QueryFleets: the HTTP query API over Firestore.
	functions.HTTP("QueryFleets", query.QueryFleets)
}
