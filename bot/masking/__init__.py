"""Masking secrets before anything reaches a person: the rules that recognise them and the
masker."""
