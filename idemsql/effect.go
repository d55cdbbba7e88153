package idemsql

// EffectSQL is the effect family of a Driver: every statement its component runs,
// with the arguments each takes and the columns each returns.
type EffectSQL struct {
}
