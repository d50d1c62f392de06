"""Guides shipped to agents, as SKILL.md files below this folder."""

from pathlib import Path

SKILLS_DIR = Path(__file__).parent

__all__ = ["SKILLS_DIR"]
