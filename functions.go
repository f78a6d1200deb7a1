// Package fleetcast is the root of the module and the package the Cloud
// Functions Go buildpack builds from the uploaded source: it imports every
// function, whose init registers it, and the runtime serves the one named
// by FUNCTION_TARGET. The code lives in the packages below.
package fleetcast

import (
	// The buildpack generates its declarative main — which only starts the
	// Functions Framework and lets the init() registrations serve — only
	// when this package itself imports the framework's functions package.
	// Without this import it generates a main that calls
	// fleetcast.<FUNCTION_TARGET>, which does not exist, and the build
	// fails. internal/build/buildpack's tests and functions/source check it.
	_ "github.com/GoogleCloudPlatform/functions-framework-go/functions"

	// IngestFleetEvents: Pub/Sub fleet events → Firestore.
	_ "github.com/fleetcast/fleetcast/functions/ingest"
	// QueryFleets: the HTTP query API over Firestore.
	_ "github.com/fleetcast/fleetcast/functions/query"
)
