// Package deploy holds no code: it is the home of idem's operational files, a
// Grafana dashboard (grafana/idem.json) and Prometheus alert rules
// (prometheus/alerts.yml), and of the test that keeps them honest: every metric
// their queries name is one idem's components register. See README.md.
package deploy
