"""Input words -> sentences: word and subword bookkeeping, hesitation fillers, the input
kind (text or a speech recognizer's words), the sentence cutter, and the per-session boundary
detector and case restorer."""
