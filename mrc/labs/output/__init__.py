"""Result folders: checked and locked before a run, filled as a whole or not at all."""
