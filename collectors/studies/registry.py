"""Every study's report section (reports.sections.Section), in report order: the one list a new
study adds itself to. The report takes them as an argument (reports may not import the studies);
longhaul.appliance.report passes this tuple."""

from __future__ import annotations

from longhaul.collectors.studies.ops.section import SECTION as OPS
from longhaul.collectors.studies.regression.section import RegressionSection
from longhaul.collectors.studies.stiff_udp.section import SECTION as STIFF_UDP
from longhaul.collectors.studies.throughput_profile.section import SECTION as THROUGHPUT_PROFILE
from longhaul.collectors.studies.throughput_profile.study import transition_rtts

# Run-level metrics the regression study follows across a suite's runs (it may not import the
# study that computes them): name -> function of a StoredRun giving {metric name: value}.
RUN_METRICS = {"transition_rtt": transition_rtts}

SECTIONS = (RegressionSection(RUN_METRICS), THROUGHPUT_PROFILE, OPS, STIFF_UDP)
