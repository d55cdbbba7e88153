package idemmysql

// Offline returns cfg for a store on a server that is not there, for the tests of
// what its calls then return: the store skips even the schema check.
func Offline(cfg Config) Config {
	cfg.offline = true
	return cfg
}
