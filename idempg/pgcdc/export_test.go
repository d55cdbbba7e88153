package pgcdc

// SetAfterPublish sets the hook run after the broker acknowledged a batch and before
// the relay confirms it.
func (r *Relay) SetAfterPublish(f func()) { r.afterPublish = f }
