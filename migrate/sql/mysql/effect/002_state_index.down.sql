DROP INDEX idem_effects_open ON idem_effects;
