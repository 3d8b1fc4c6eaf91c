// Package integrations holds no code: its tests run real client libraries
// (stripe-go, the AWS SDK for Go v2, resty) and net/http/httputil's
// ReverseProxy over a retryfuse.Transport against fake servers on the
// loopback interface, and pin the configuration under which each one
// applies a logical write once and sends no more requests than one retry
// owner would. README.md gives the configurations as recipes.
//
// It is a module of its own, so that the core module never depends on
// these libraries.
package integrations
