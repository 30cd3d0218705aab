"""What a session shows: `Update`s, the display of a sentence's committed words and tentative
tail, number notation, notes about the input, and where a text ends a sentence."""
