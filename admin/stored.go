package admin

import "github.com/idemhq/idem/admin/view"

// MaxPreviewHeaders bounds the header fields a StoredHTTP lists.
const MaxPreviewHeaders = view.MaxPreviewHeaders

// The view of a stored HTTP response, as the operator view declares it.
type (
	StoredHTTP  = view.StoredHTTP
	HeaderField = view.HeaderField
	BodyPreview = view.BodyPreview
)

// DecodeStoredHTTP is view.DecodeStoredHTTP: the view of result when it is a
// response stored by idemhttp, and false for any other bytes.
func DecodeStoredHTTP(result []byte) (StoredHTTP, bool) { return view.DecodeStoredHTTP(result) }
