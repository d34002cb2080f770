"""Tests for kerasplm.generation."""
