"""`perfci demo`: the whole loop on one machine (scratch history → server → agent → alert →
bisect → plots) on the embedded defaults."""
