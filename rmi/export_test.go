package rmi

// SetPlaintextFrames turns frame sealing off (true) or on for connections
// made afterwards, so a benchmark can compare both in one run. Not safe to
// call while connections are being made.
func SetPlaintextFrames(on bool) { plaintextFrames = on }
