//go:build tools

// Package tools pins restic's rest-server for the twin: `go build` of its main package
// from this module, with go.sum as the only record of every module's hash (the checksum
// database is not reachable here, so GOSUMDB=off and -mod=readonly).
package tools

import _ "github.com/restic/rest-server/cmd/rest-server"
