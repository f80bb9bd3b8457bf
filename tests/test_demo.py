"""The README's first command: the demo runs end to end (tiny settings) and writes what it says."""

from __future__ import annotations

import pyrolik
from pyrolik.app.demo import main


def test_quick_demo_writes_table_results_and_plots(tmp_path, capsys):
    assert main(["--quick", "--quiet", "--output", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for word in ("VAE", "GAN", "GMMN", "ais", "iwae", "likelihood_weighting", "kde", "BDMC gap"):
        assert word in out
    for name in ("summary.csv", "estimates.png", "bdmc_vae.png", "posterior_gan.png",
                 "vae_ais.nc", "vae_bdmc.nc", "gan_kde.nc"):
        assert (tmp_path / name).stat().st_size > 0
    reloaded = pyrolik.load(tmp_path / "vae_bdmc.nc")
    assert reloaded.gap == reloaded.gap and len(reloaded.x) == 5  # summarised without rerunning
