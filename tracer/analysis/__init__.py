"""The report's analysis: what a survey's traces say as a whole (each framework's
portability report, its figures and verdict, the decision sites, the GPU and ARM
tables, the models' rows), built once into the survey model (:mod:`.survey_model`)
that every renderer reads. Trace-level processing (normalising, tagging, aligning,
diffing one pair of traces) is tracer.processing, a floor below."""
