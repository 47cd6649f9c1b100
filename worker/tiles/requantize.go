package tiles

import (
	"bytes"
	"fmt"
)

// Requantize is a baseline JPEG (a screencast frame, or an atlas this
// package wrote) at a coarser tier (TierLow, TierLowest): its blocks
// requantized, no pixel decoded. A viewer on a slow link gets its frames
// and updates this way (worker/engine, tier.go).
func Requantize(data []byte, tier int) ([]byte, error) {
	var f coefFrame
	if err := parseCoef(data, &f); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if !f.frameTier(&b, tier) {
		return nil, fmt.Errorf("tiles: no tier %d for this JPEG", tier)
	}
	return b.Bytes(), nil
}
